"""The Discord front door's process-wide parts."""

from __future__ import annotations

from ..engine import get_engine
from ..singleton import ProcessSingleton
from ..store import StateStore
from .memory import DiscordMemory
from .rest import DiscordClient
from .settings import DiscordSettings, get_discord_settings


def build_discord(settings: DiscordSettings, engine, transport=None, ollama=None) -> DiscordMemory:
    """Discord memory on an engine; tests pass transports to reach their fakes."""
    client = DiscordClient(
        settings.api_base, settings.resolve_bot_token(), settings.application_id, transport=transport
    )
    return DiscordMemory(settings, engine.service, engine.queue, client, StateStore(), ollama=ollama)


_discord: ProcessSingleton[DiscordMemory] = ProcessSingleton(
    lambda: build_discord(get_discord_settings(), get_engine())
)
get_discord = _discord.get
set_discord = _discord.set
