"""Settings kept in StateTable: the embedder's (one item) and each LibreChat user's memory settings."""

from __future__ import annotations

from ...bookkeeping import EmbeddingSettings
from .. import keys
from ..dynamo import guard
from ..models import StateItem
from ._items import get


class EmbedderSettingsStore:
    """The stored embedder settings (the environment's defaults apply while there are none)."""

    def get(self) -> EmbeddingSettings | None:
        """The stored settings, or None."""
        item = guard(lambda: get(*keys.EMBEDDING_SETTINGS))
        return EmbeddingSettings(**item.data) if item is not None and item.data is not None else None

    def save(self, settings: EmbeddingSettings) -> None:
        guard(lambda: StateItem(*keys.EMBEDDING_SETTINGS, data=settings.model_dump()).save())


class ChatSettingsStore:
    """A LibreChat user's memory settings: per chat, and their default (conversation None)."""

    def of(self, bot: str, user: str) -> dict[str | None, bool]:
        """{conversation: on} as stored, the user's default under None."""
        items = guard(lambda: list(StateItem.query(keys.chat_settings_pk(bot, user))))
        return {keys.conversation_of(i.sk): bool(i.value) for i in items if i.value is not None}

    def set(self, bot: str, user: str, conversation: str | None, enabled: bool | None) -> None:
        """Set (or with None, drop) a chat's setting, or the user's default (conversation None)."""
        item = StateItem(
            keys.chat_settings_pk(bot, user),
            keys.chat_setting_sk(conversation),
            value=int(enabled) if enabled is not None else None,
        )
        guard(item.delete if enabled is None else item.save)
