"""One validated settings object, built once per process from ENGRAM_* environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything engram reads from its environment."""

    # The template sets every variable, unused ones to "": empty means "not set", never "the empty string".
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore", env_ignore_empty=True)

    # DynamoDB (endpoint_url set only for a local engine such as moto's server)
    memories_table: str = "engram-memories"
    state_table: str = "engram-state"
    aws_region: str = Field(default="us-east-1", validation_alias="AWS_REGION")
    dynamodb_endpoint: str | None = None

    # SQS
    jobs_queue_url: str | None = None
    interactive_queue_url: str | None = None  # /ask, remember, forget: never behind backfill
    sqs_endpoint: str | None = None

    # Qdrant: a URL (server or Qdrant Cloud), else the embedded engine under data_dir
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_api_key_parameter: str | None = None
    collection: str = "engram"
    data_dir: Path = Path(".engram")

    # Embedder: local (MiniLM shipped in a PyPI package), ollama, remote (OpenAI-style) or off
    embedder: Literal["local", "ollama", "remote", "off"] = "local"
    embedding_model: str = "all-minilm"
    ollama_url: str = "http://127.0.0.1:11434"
    remote_embeddings_url: str | None = None
    remote_embeddings_key: str | None = None
    embed_timeout_s: float = 10.0
    torch_threads: int = Field(0, ge=0)  # the local embedder's torch threads; 0: chosen per call

    # Memory API key: the value itself locally, an SSM SecureString name on AWS
    api_key: str | None = None
    api_key_parameter: str | None = None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, validated on first use."""
    return Settings()
