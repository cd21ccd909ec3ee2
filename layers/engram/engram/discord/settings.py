"""Discord settings, from the environment (secrets from SSM when named by *_PARAMETER on AWS)."""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DiscordSettings(BaseSettings):
    """Everything the Discord front door reads from its environment."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    application_id: str | None = Field(None, validation_alias="DISCORD_APPLICATION_ID")
    public_key: str | None = Field(None, validation_alias="DISCORD_PUBLIC_KEY")
    bot_token: str | None = Field(None, validation_alias="DISCORD_BOT_TOKEN")
    api_base: str = Field("https://discord.com/api/v10", validation_alias="DISCORD_API_BASE")
    channels_disallowed: set[str] = Field(default_factory=set, validation_alias="DISCORD_CHANNELS_DISALLOWED")
    ollama_url: str = Field("http://127.0.0.1:11434", validation_alias="OLLAMA_URL")
    chat_model: str | None = Field(None, validation_alias="OLLAMA_CHAT_MODEL")
    vision_model: str | None = Field(None, validation_alias="OLLAMA_VISION_MODEL")
    top_k: int = Field(5, ge=1, le=50, validation_alias="MEMORY_TOP_K")
    pages_per_job: int = Field(5, ge=1, le=50, validation_alias="DISCORD_BACKFILL_PAGES_PER_JOB")
    context_messages: int = Field(20, ge=1, le=100, validation_alias="DISCORD_CONTEXT_MESSAGES")
    max_signature_age_s: int = Field(300, validation_alias="DISCORD_MAX_SIGNATURE_AGE_S")
    # Links are never fetched from private, loopback or link-local addresses; this names networks that
    # may be fetched anyway (tests, an internal wiki). Empty by default.
    fetch_allow_networks: set[str] = Field(default_factory=set, validation_alias="LINK_FETCH_ALLOW_NETWORKS")

    @field_validator("channels_disallowed", "fetch_allow_networks", mode="before")
    @classmethod
    def _ids(cls, value):
        if isinstance(value, str):
            return {v.strip() for v in value.split(",") if v.strip()}
        return value

    @property
    def bot(self) -> str:
        """Discord memories belong to the bot whose id is the application id."""
        return self.application_id or "discord"


@lru_cache(maxsize=1)
def get_discord_settings() -> DiscordSettings:
    """Process-wide settings; DISCORD_BOT_TOKEN may come from the SSM SecureString it names."""
    extra = {}
    parameter = os.environ.get("DISCORD_BOT_TOKEN_PARAMETER")
    if parameter and not os.environ.get("DISCORD_BOT_TOKEN"):
        from aws_lambda_powertools.utilities import parameters

        extra["DISCORD_BOT_TOKEN"] = parameters.get_parameter(parameter, decrypt=True, max_age=300)
    return DiscordSettings(**extra)
