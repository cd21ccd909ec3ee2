"""The engine: the parts a door is handed. It is built in one place (engram.engine, the wiring); the doors
name its type from here, below them, and never look the process's engine up themselves."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .config import Settings
from .config.secrets import secure_parameter
from .embedding import EmbeddingManager
from .jobs import JobQueue
from .keeper import IndexKeeper
from .ports import StatePort
from .service import MemoryService


@dataclass
class Engine:
    """Everything a handler needs."""

    settings: Settings
    state: StatePort
    service: MemoryService
    queue: JobQueue
    embedding: EmbeddingManager
    keeper: IndexKeeper

    def refresh(self) -> None:
        """Pick up embedder settings another process changed (a DynamoDB read at most every 30 s)."""
        with contextlib.suppress(Exception):  # DynamoDB down: keep serving with what we have
            self.embedding.current()

    def api_key(self) -> str | None:
        """The Memory API key: the configured value, else the SSM SecureString (cached 5 minutes)."""
        if self.settings.api_key:
            return self.settings.api_key
        if self.settings.api_key_parameter:
            return secure_parameter(self.settings.api_key_parameter)
        return None

    def close(self) -> None:
        """Release the index."""
        self.service.index.close()
