"""Discord settings: a section of engram.config.Settings, read from the environment by their own names
(DISCORD_*, OLLAMA_*, ...); the bot token from SSM when named by DISCORD_BOT_TOKEN_PARAMETER on AWS."""

from __future__ import annotations

import logging

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from .secrets import MissingSecret, secure_parameter

# Comma-separated in the environment (the template always sets it, often to ""): split by the validator below
CommaSet = set[str]
log = logging.getLogger(__name__)


class DiscordSettings(BaseModel):
    """Everything the Discord front door reads from its environment."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    application_id: str | None = Field(None, validation_alias="DISCORD_APPLICATION_ID")
    public_key: str | None = Field(None, validation_alias="DISCORD_PUBLIC_KEY")
    bot_token: str | None = Field(None, validation_alias="DISCORD_BOT_TOKEN")
    bot_token_parameter: str | None = Field(None, validation_alias="DISCORD_BOT_TOKEN_PARAMETER")
    api_base: str = Field("https://discord.com/api/v10", validation_alias="DISCORD_API_BASE")
    channels_disallowed: CommaSet = Field(default_factory=set, validation_alias="DISCORD_CHANNELS_DISALLOWED")
    # Messages older than this many days are neither backfilled, stored, recalled nor kept (the sweep
    # deletes them as they age out); None: kept. Discord's review asks for a retention policy: docs/discord.md
    retention_days: int | None = Field(None, ge=1, le=36_500, validation_alias="DISCORD_RETENTION_DAYS")
    # A server the bot has left is no longer recalled at once; its memories are deleted this long after
    left_server_grace_hours: float = Field(
        72, ge=0, le=24 * 365, validation_alias="DISCORD_LEFT_SERVER_GRACE_HOURS"
    )
    chat_model: str | None = Field(
        None, validation_alias=AliasChoices("DISCORD_ASK_CHAT_MODEL", "OLLAMA_CHAT_MODEL")
    )
    # /ask's chat model on any OpenAI-compatible API (OpenAI, OpenRouter, vLLM, LM Studio, Ollama's /v1): its
    # base URL (…/v1) and key; unset, /ask asks Ollama (ENGRAM_OLLAMA_URL) with OLLAMA_CHAT_MODEL
    chat_url: str | None = Field(None, validation_alias="DISCORD_ASK_CHAT_URL")
    chat_key: str | None = Field(None, validation_alias="DISCORD_ASK_CHAT_KEY")
    vision_model: str | None = Field(None, validation_alias="OLLAMA_VISION_MODEL")
    top_k: int = Field(5, ge=1, le=50, validation_alias="MEMORY_TOP_K")
    # How relevant a memory must be for /ask to use it (engram.relevance; as the proxy's recall)
    min_score: float = Field(0.4, ge=0, le=1, validation_alias="MEMORY_MIN_SCORE")
    # How long /ask waits for its memories (an embed, Qdrant's searches) before it answers without them and
    # says so: a Qdrant or an embedder that hangs would otherwise hold an interactive slot for its timeouts
    memory_budget_ms: int = Field(3000, ge=100, le=60_000, validation_alias="DISCORD_ASK_MEMORY_BUDGET_MS")
    pages_per_job: int = Field(5, ge=1, le=50, validation_alias="DISCORD_BACKFILL_PAGES_PER_JOB")
    # a quiet channel holding messages stored in the last WINDOW_DAYS is re-read for edits and deletions at
    # most this often (0: every catch-up tick); a channel with new messages is re-read with them, for free
    window_every_s: int = Field(0, ge=0, validation_alias="DISCORD_WINDOW_EVERY_S")
    # ... and at most this many quiet channels a tick, those re-read longest ago first (the rest on the
    # ticks after): at 10,000 servers every active channel a tick would be far past Discord's 50/s
    window_budget: int = Field(100, ge=0, validation_alias="DISCORD_WINDOW_BUDGET")
    # a catch-up tick visits at most this many servers (two requests each: their channels, their active
    # threads), in turn: at 10,000 servers a tick costs what it costs at 1,000, and a quiet server is read
    # every (servers / this) ticks (a channel someone /asks in is read at once)
    guilds_per_tick: int = Field(1000, ge=1, le=10_000, validation_alias="DISCORD_GUILDS_PER_TICK")
    # a /memory remember checks this many of the bot's servers a job for the user's membership (one Get
    # Guild Member each): an opt-in at 10,000 servers is many short jobs, none near the worker's timeout
    guilds_per_job: int = Field(100, ge=1, le=200, validation_alias="DISCORD_GUILDS_PER_JOB")
    # a /memory remember this soon after the user's last one is answered, not run again
    remember_cooldown_s: int = Field(600, ge=0, validation_alias="DISCORD_REMEMBER_COOLDOWN_S")
    context_messages: int = Field(20, ge=1, le=100, validation_alias="DISCORD_CONTEXT_MESSAGES")
    max_signature_age_s: int = Field(300, validation_alias="DISCORD_MAX_SIGNATURE_AGE_S")
    max_signature_future_s: int = Field(30, validation_alias="DISCORD_MAX_SIGNATURE_FUTURE_S")
    # Links are never fetched from private, loopback or link-local addresses; this names networks that
    # may be fetched anyway (tests, an internal wiki). Empty by default.
    fetch_allow_networks: CommaSet = Field(default_factory=set, validation_alias="LINK_FETCH_ALLOW_NETWORKS")

    @field_validator("channels_disallowed", "fetch_allow_networks", mode="before")
    @classmethod
    def _ids(cls, value: object) -> object:
        if isinstance(value, str):
            return {v.strip() for v in value.split(",") if v.strip()}
        return value

    @field_validator("retention_days", mode="before")
    @classmethod
    def _keep_when_empty(cls, value: object) -> object:
        return None if value in ("", "0", 0) else value  # the template sets "" for keep

    def disallowed(self, channel: str | None, parent: str | None = None) -> bool:
        """Whether a channel is not to be stored: itself named in DISCORD_CHANNELS_DISALLOWED, or a thread or
        forum post under one (its parent), or a channel under a named category."""
        return any(c in self.channels_disallowed for c in (channel, parent) if c)

    def retention_cutoff_ms(self, now: int) -> int | None:
        """Messages written before this (ms) are past retention; None: kept."""
        return None if self.retention_days is None else now - self.retention_days * 86_400_000

    @property
    def bot(self) -> str:
        """Discord memories belong to the bot whose id is the application id."""
        return self.application_id or "discord"

    def resolve_bot_token(self) -> str | None:
        """The bot token: the value itself, else the SSM SecureString it names (read when first needed,
        by the worker only; the interactions function never needs it and may not read it)."""
        if self.bot_token or not self.bot_token_parameter:
            return self.bot_token
        try:
            return secure_parameter(self.bot_token_parameter)
        except MissingSecret:  # Discord is not set up on this stack
            log.warning("no Discord bot token: %s does not exist", self.bot_token_parameter)
            return None
