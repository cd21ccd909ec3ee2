"""The proxy's settings: a section of engram.config.Settings, read from the environment by
LibreChat-compatible names (UPSTREAMS, MEMORY_*, EXTRACT_*, ...)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .secrets import secure_parameter

RESERVED = {"v1", "mcp", "healthz", "livez", "openapi.json", "docs", "redoc", "discord"}


class Upstream(BaseModel):
    """One model provider mounted at /<name>/."""

    name: str
    baseUrl: str
    api: Literal["openai", "anthropic"] = "openai"
    apiKey: str | None = None
    forceIncludeUsage: bool = True
    # Where an OpenAI-style turn gets engram's block (the date, the memories): "system", at the end of the
    # leading system message (LibreChat's instructions stay a cached prefix); "user", at the start of the
    # turn's user message (the whole history stays a cached prefix). Never a system message of its own.
    memoryPlacement: Literal["system", "user"] = "system"
    # Deliberately open: callers without engram's key may use it as a plain pass-through (their own
    # provider key, no memory). Off by default: the proxy's public URL is not an open door.
    open: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", value) or value.lower() in RESERVED:
            raise ValueError(
                f"upstream name {value!r} must be a plain path segment and not one of {sorted(RESERVED)}"
            )
        return value

    @field_validator("baseUrl")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://", value):
            raise ValueError("baseUrl must be an http(s) URL")
        return value.rstrip("/")

    def url(self, path: str) -> str:
        """The provider URL for a path after /<name>/ (a trailing /v1 in baseUrl is not doubled)."""
        base = self.baseUrl
        if base.endswith("/v1") and path.startswith("v1/"):
            path = path[3:]
        return f"{base}/{path}"


class ProxySettings(BaseModel):
    """Everything the proxy reads from its environment."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    upstreams: list[Upstream] = Field(default_factory=list, validation_alias="UPSTREAMS")
    user_header: str = Field("x-librechat-user-id", validation_alias="LIBRECHAT_USER_HEADER")
    conversation_header: str = Field(
        "x-librechat-conversation-id", validation_alias="LIBRECHAT_CONVERSATION_HEADER"
    )
    # {{LIBRECHAT_USER_NAME}} and {{LIBRECHAT_USER_USERNAME}}: the names a user's facts keep as their
    # author's (engram.names), so that naming a member of a shared project favours what they said
    user_name_header: str = Field("x-librechat-user-name", validation_alias="LIBRECHAT_USER_NAME_HEADER")
    username_header: str = Field("x-librechat-username", validation_alias="LIBRECHAT_USERNAME_HEADER")
    # {{LIBRECHAT_BODY_PARENTMESSAGEID}}: how a fact finds the message LibreChat stored it under
    parent_message_header: str = Field(
        "x-librechat-parent-message-id", validation_alias="LIBRECHAT_PARENT_MESSAGE_HEADER"
    )
    # The key LibreChat holds: opens the proxy and /mcp, never the Memory API (its admin key is another).
    proxy_key: str | None = Field(None, validation_alias="ENGRAM_PROXY_KEY")
    mongo_uri: str | None = Field(None, validation_alias="LIBRECHAT_MONGO_URI")
    mongo_db: str | None = Field(None, validation_alias="LIBRECHAT_MONGO_DB")
    mongo_timeout_ms: int = Field(1500, validation_alias="LIBRECHAT_MONGO_TIMEOUT_MS")
    bot: str = Field("librechat", validation_alias="LIBRECHAT_BOT")

    sharing: Literal["user", "project"] = Field("user", validation_alias="MEMORY_SHARING")
    recall_scope: Literal["project", "all", "global"] = Field("all", validation_alias="MEMORY_RECALL_SCOPE")
    projectless: Literal["global", "off"] = Field("global", validation_alias="MEMORY_PROJECTLESS")
    default_enabled: bool = Field(True, validation_alias="MEMORY_DEFAULT_ENABLED")
    recall_enabled: bool = Field(True, validation_alias="MEMORY_RECALL_ENABLED")
    write_mode: Literal["llm", "explicit", "off"] = Field("llm", validation_alias="MEMORY_WRITE_MODE")
    recall_limit: int = Field(6, ge=1, le=50, validation_alias="MEMORY_RECALL_LIMIT")
    # How relevant a memory must be to be told (engram.relevance; 0: the best found, however unrelated).
    # 0.4: on LoCoMo it costs recall@10 at most 0.004, and 87 % of unrelated requests inject nothing.
    recall_min_score: float = Field(0.4, ge=0, le=1, validation_alias="MEMORY_RECALL_MIN_SCORE")
    recall_mode: Literal["relevant", "newest", "both"] = Field(
        "relevant", validation_alias="MEMORY_RECALL_MODE"
    )
    max_context_chars: int = Field(4000, ge=200, validation_alias="MEMORY_MAX_CONTEXT_CHARS")
    query_message_count: int = Field(3, ge=1, le=20, validation_alias="MEMORY_QUERY_MESSAGE_COUNT")
    max_per_turn: int = Field(3, ge=0, le=20, validation_alias="MEMORY_MAX_PER_TURN")
    dedupe_threshold: float = Field(0.82, ge=0, le=1, validation_alias="MEMORY_DEDUPE_THRESHOLD")
    command_prefix: str = Field("/memory", validation_alias="MEMORY_COMMAND_PREFIX")
    # The first words of an operator's own titlePrompt (or any side-call prompt engram does not know):
    # a request whose user message holds one is passed through untouched. Comma-separated.
    side_call_markers: tuple[str, ...] = Field((), validation_alias="MEMORY_SIDE_CALL_MARKERS")
    datetime_enabled: bool = Field(True, validation_alias="PROMPT_DATETIME_ENABLED")

    extract_base_url: str | None = Field(None, validation_alias="EXTRACT_BASE_URL")
    extract_model: str | None = Field(None, validation_alias="EXTRACT_MODEL")
    extract_api_key: str | None = Field(None, validation_alias="EXTRACT_API_KEY")
    extract_timeout_ms: int = Field(30000, validation_alias="EXTRACT_TIMEOUT_MS")

    cache_recall_ttl_ms: int = Field(120_000, validation_alias="CACHE_RECALL_TTL_MS")
    cache_settings_ttl_ms: int = Field(30_000, validation_alias="CACHE_SETTINGS_TTL_MS")
    cache_project_ttl_ms: int = Field(300_000, validation_alias="CACHE_PROJECT_TTL_MS")
    cache_max_entries: int = Field(5000, validation_alias="CACHE_MAX_ENTRIES")
    upstream_timeout_s: float = Field(600.0, validation_alias="UPSTREAM_TIMEOUT_S")
    slow_call_ms: int = Field(1000, validation_alias="SLOW_CALL_MS")
    # How long a turn waits for its memory (settings, recall) before it goes on without (engram.breaker)
    memory_budget_ms: int = Field(1000, ge=50, le=30_000, validation_alias="MEMORY_BUDGET_MS")
    # ... and, once a turn went over it, how long the turns that follow do not wait at all
    memory_pause_s: float = Field(30.0, ge=0, le=3600, validation_alias="MEMORY_PAUSE_S")

    mcp_enabled: bool = Field(True, validation_alias="MCP_ENABLED")

    # Langfuse tracing of proxied turns (all four unset: off)
    langfuse_public_key: str | None = Field(None, validation_alias="LANGFUSE_PUBLIC_KEY")
    langfuse_secret_key: str | None = Field(None, validation_alias="LANGFUSE_SECRET_KEY")
    langfuse_base_url: str | None = Field(None, validation_alias="LANGFUSE_BASE_URL")
    langfuse_environment: str | None = Field(None, validation_alias="LANGFUSE_ENVIRONMENT")

    # On AWS the credentials live in SSM SecureStrings these name, read at run time (with_secrets)
    upstreams_parameter: str | None = Field(None, validation_alias="UPSTREAMS_PARAMETER")
    extract_api_key_parameter: str | None = Field(None, validation_alias="EXTRACT_API_KEY_PARAMETER")
    mongo_uri_parameter: str | None = Field(None, validation_alias="LIBRECHAT_MONGO_URI_PARAMETER")
    proxy_key_parameter: str | None = Field(None, validation_alias="ENGRAM_PROXY_KEY_PARAMETER")

    @field_validator("side_call_markers", mode="before")
    @classmethod
    def _markers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(m.strip() for m in value.split(",") if m.strip())
        return value

    @field_validator("upstreams", mode="before")
    @classmethod
    def _parse(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else []
        names = [u["name"] if isinstance(u, dict) else u.name for u in value]
        if len(set(names)) != len(names):
            raise ValueError("UPSTREAMS names must be unique")
        return value

    def upstream(self, name: str) -> Upstream | None:
        """The upstream mounted at /<name>/."""
        return next((u for u in self.upstreams if u.name == name), None)


# Settings that carry credentials, and the setting naming the SSM SecureString each comes from on AWS
SECRET_SETTINGS = {
    "upstreams": "upstreams_parameter",
    "extract_api_key": "extract_api_key_parameter",
    "mongo_uri": "mongo_uri_parameter",
    "proxy_key": "proxy_key_parameter",
}


def with_secrets(settings: ProxySettings) -> ProxySettings:
    """The settings with each credential not given in the environment read from the SSM parameter named."""
    fetched: dict[str, Any] = {}
    for name, parameter_setting in SECRET_SETTINGS.items():
        parameter = getattr(settings, parameter_setting)
        if parameter and not getattr(settings, name):
            fetched[name] = secure_parameter(parameter)
    if not fetched:
        return settings
    return ProxySettings.model_validate({**settings.model_dump(), **fetched})
