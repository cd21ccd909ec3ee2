"""The Discord gateway process (engram.discord.gateway): run as one always-on container (the template's
optional Fargate service), or anywhere with the functions' environment. It forwards what changes on Discord
to the Discord jobs queue; the worker function applies it. Exits when the gateway cannot be reached: the
scheduled REST catch-up is then the whole capture."""

import asyncio
import logging

from engram.config import get_discord_settings, get_settings
from engram.discord.gateway import GatewayCapture
from engram.jobs import build_queue
from engram.store import StateStore, bind_tables


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings, door = get_settings(), get_discord_settings()
    bind_tables(settings)
    state, queue = StateStore(), build_queue(settings)
    capture = GatewayCapture(door, queue.send, lambda users: state.consents.consenting(door.bot, users))
    asyncio.run(capture.run())


if __name__ == "__main__":
    main()
