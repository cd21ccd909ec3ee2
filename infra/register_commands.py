"""Register engram's commands with Discord: `/memory remember|forget|status|export`, `/ask prompt` and the
message command "Forget this message".

    DISCORD_APPLICATION_ID=... DISCORD_BOT_TOKEN=... python -m infra.register_commands [--guild ID]

Global commands appear at once (Discord dropped their hour of caching long ago);
--guild registers them on one server only, for trying them out.
"""

from __future__ import annotations

import argparse
import os
import sys

import httpx

# interactions/application-commands.mdx: `contexts` — where a command shows (0 a server, 1 the bot's DM, 2 a
# group DM) and `integration_types` — how the app is installed (0 to a server); without them a command shows
# everywhere. /memory works wherever the user is (consent is global per user); /ask only in a server.
GUILD_INSTALL, IN_A_SERVER, IN_THE_BOTS_DM = 0, 0, 1
COMMANDS = [
    {
        "name": "memory",
        "description": "Long-term memory: opt in, opt out, or see where it stands",
        "type": 1,
        "contexts": [IN_A_SERVER, IN_THE_BOTS_DM],
        "integration_types": [GUILD_INSTALL],
        "options": [
            {
                "type": 1,
                "name": "remember",
                "description": "Opt in: remember my messages (and backfill my history)",
            },
            {
                "type": 1,
                "name": "forget",
                "description": "Opt out: delete everything remembered about me, everywhere",
            },
            {
                "type": 1,
                "name": "export",
                "description": "Send me a file with everything remembered about me",
            },
            {
                "type": 1,
                "name": "status",
                "description": "Am I opted in, how far is the backfill, how much is stored",
            },
        ],
    },
    {
        "name": "ask",
        "description": "Ask the bot, with what it remembers from this server",
        "type": 1,
        "contexts": [IN_A_SERVER],
        "integration_types": [GUILD_INSTALL],
        "options": [
            {
                "type": 3,
                "name": "prompt",
                "description": "What do you want to ask?",
                "required": True,
                "max_length": 6000,
            }
        ],
    },
    {  # a message's context menu (type 3): no description, no options; it needs no Message Content intent
        "name": "Forget this message",
        "type": 3,
        "contexts": [IN_A_SERVER],
        "integration_types": [GUILD_INSTALL],
    },
]


def register(
    application_id: str, bot_token: str, api_base: str, guild: str | None = None, transport=None
) -> list[dict]:
    """Overwrite the application's commands with engram's (a bulk PUT, so it is idempotent)."""
    path = (
        f"/applications/{application_id}/guilds/{guild}/commands"
        if guild
        else f"/applications/{application_id}/commands"
    )
    with httpx.Client(
        base_url=api_base.rstrip("/"), headers={"Authorization": f"Bot {bot_token}"}, transport=transport
    ) as http:
        response = http.put(path, json=COMMANDS)
        response.raise_for_status()
        return response.json()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--guild", help="register on one server only (instant)")
    args = parser.parse_args()
    app_id, token = os.environ.get("DISCORD_APPLICATION_ID"), os.environ.get("DISCORD_BOT_TOKEN")
    if not app_id or not token:
        sys.exit("set DISCORD_APPLICATION_ID and DISCORD_BOT_TOKEN")
    api_base = os.environ.get("DISCORD_API_BASE", "https://discord.com/api/v10")
    try:
        done = register(app_id, token, api_base, args.guild)
    except httpx.HTTPStatusError as exc:  # one line, no traceback: what Discord said and what to check
        hint = " (check DISCORD_BOT_TOKEN)" if exc.response.status_code == 401 else ""
        sys.exit(f"Discord refused the commands: {exc.response.status_code} {exc.response.text[:300]}{hint}")
    except httpx.TransportError as exc:
        sys.exit(f"cannot reach Discord at {api_base} ({type(exc).__name__}): is this machine online?")
    print("registered: " + ", ".join(c["name"] for c in done))


if __name__ == "__main__":
    main()
