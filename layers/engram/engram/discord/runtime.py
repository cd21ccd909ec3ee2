"""The Discord front door's process-wide parts."""

from __future__ import annotations

import httpx

from ..breaker import guarded
from ..config import get_discord_settings, get_settings
from ..config.discord import DiscordSettings
from ..engine import get_engine
from ..engine_parts import Engine
from ..observability import count
from ..singleton import ProcessSingleton
from .core import DiscordCore
from .limits import RateLimits, shared_global
from .memory import DiscordMemory
from .rest import DiscordClient


def on_lambda() -> bool:
    return get_settings().runtime.on_lambda


def build_discord(
    settings: DiscordSettings,
    engine: Engine,
    transport: httpx.BaseTransport | None = None,
    ollama: httpx.Client | None = None,
) -> DiscordMemory:
    """Discord memory on an engine; tests pass transports to reach their fakes."""
    state = engine.state
    bot = settings.bot
    # every process holding the bot's token counts toward Discord's one global limit: on Lambda (up to eight
    # worker functions at once) it is counted in DynamoDB; one local process counts it alone, exactly
    shared = shared_global(lambda w, n, e: state.limits.take_rate_slot(bot, w, n, e)) if on_lambda() else None
    limits = RateLimits(global_limit=shared, on_count=count)
    client = DiscordClient(
        settings.api_base,
        settings.resolve_bot_token(),
        settings.application_id,
        transport=transport,
        limits=limits,
    )
    # the chat and vision models /ask and attachments use sit on the one Ollama the settings name
    if ollama is None:
        # a model may take minutes to answer, never to connect; one that hangs is rested (engram.breaker)
        ollama = httpx.Client(
            base_url=engine.settings.ollama_url.rstrip("/"),
            timeout=httpx.Timeout(120, connect=5),
            transport=guarded(None, "the chat model"),
        )
    core = DiscordCore(settings, engine.service, engine.queue, client, state, ollama)
    if settings.chat_url:  # /ask on an OpenAI-compatible chat API instead of Ollama
        core.chat = httpx.Client(
            base_url=settings.chat_url.rstrip("/"),
            headers={"authorization": f"Bearer {settings.chat_key}"} if settings.chat_key else {},
            timeout=httpx.Timeout(120, connect=5),
            transport=guarded(None, "the chat model"),
        )
    return DiscordMemory(core)


_discord: ProcessSingleton[DiscordMemory] = ProcessSingleton(
    lambda: build_discord(get_discord_settings(), get_engine())
)
get_discord = _discord.get
set_discord = _discord.set
