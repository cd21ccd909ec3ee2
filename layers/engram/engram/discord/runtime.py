"""The Discord front door's process-wide parts."""

from __future__ import annotations

import threading

from ..engine import get_engine
from .memory import DiscordMemory
from .rest import DiscordClient
from .settings import DiscordSettings, get_discord_settings

_discord: DiscordMemory | None = None
_lock = threading.Lock()


def build_discord(settings: DiscordSettings, engine, transport=None, ollama=None) -> DiscordMemory:
    """Discord memory on an engine; tests pass transports to reach their fakes."""
    client = DiscordClient(settings.api_base, settings.bot_token, settings.application_id, transport=transport)
    return DiscordMemory(settings, engine.service, engine.queue, client, ollama=ollama)


def get_discord() -> DiscordMemory:
    """The process-wide Discord memory."""
    global _discord
    with _lock:
        if _discord is None:
            _discord = build_discord(get_discord_settings(), get_engine())
        return _discord


def set_discord(discord: DiscordMemory | None) -> None:
    """Install one (the local stack and tests build their own)."""
    global _discord
    with _lock:
        _discord = discord
