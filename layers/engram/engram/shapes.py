"""A memory's outward shapes — the Memory API's JSON and its schema, the index point's payload, the export
line — from one table, so that adding a field is one edit here (and forget's reach is one list to read)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .text import format_memory_id


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a memory: its attribute, its name in the API and export, in the index payload."""

    attr: str
    api: str | None  # the Memory API's (and the export's) name; None: not shown
    payload: str | None  # the point payload's name; None: not in the index
    always: bool = False  # in the API's JSON even when empty (null)
    export_only: bool = False  # in export lines, not in the API's JSON
    kind: str = "plain"  # plain | time (epoch ms; ISO-8601 outward) | id (mem:12 outward)
    # the API's type of it (what /openapi.json documents; api.schemas.MemoryOut is made from these)
    api_type: Any = str | None
    example: str | None = None


FIELDS = (
    Field("kind", "kind", "kind", always=True, api_type=Literal["fact", "message"]),
    Field("id", "id", None, always=True, kind="id", api_type=str, example="mem:12"),
    Field("bot", None, "bot"),
    Field("text", "text", "text", always=True, api_type=str),
    Field("saved_by", "savedBy", "savedBy", always=True, api_type=Literal["bot", "owner", "user"]),
    Field("created_at", "createdAt", "createdAt", always=True, kind="time", api_type=str),
    Field("updated_at", "updatedAt", "updatedAt", always=True, kind="time", api_type=str),
    Field("user", "userId", "user", always=True),
    Field("server", "serverId", "server", always=True),
    Field("project", "project", "project", always=True),
    Field("source_id", "sourceMessageId", "sourceId"),
    Field("metadata", "metadata", "metadata", api_type=dict[str, str | int | float | bool] | None),
    Field("expires_at", "expiresAt", "expiresAt", kind="time", api_type=str | None),
    Field("thread", "threadId", None, export_only=True),
    Field("context", "context", None, export_only=True),
    # in the payload so that a read can hide a point quoting someone whose forget is under way
    Field("context_author", "contextUserId", "contextUser", export_only=True),
    # which memory its context is (the question a message answers: engram.replies)
    Field("context_source", None, "contextSource"),
    Field("content", "content", "content", api_type=Any | None),
    # a memory's earlier texts (GET …/history shows them); an export carries them
    Field("versions", "history", None, export_only=True, kind="versions"),
)


def api_fields() -> list[Field]:
    """The fields of a memory's API JSON, in order."""
    return [f for f in FIELDS if f.api is not None and not f.export_only]


def iso(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (how the API writes times)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _outward(field: Field, value: Any) -> Any:
    if value is None:
        return None
    if field.kind == "time":
        return iso(int(value))
    if field.kind == "id":
        return format_memory_id(int(value))
    if field.kind == "versions":  # as GET …/history shows them, oldest first
        return [{**v, "at": iso(int(v["at"]))} for v in value]
    return value


def _value(source: Any, attr: str) -> Any:
    value = getattr(source, attr, None)
    return (
        int(value)
        if attr in ("id", "created_at", "updated_at", "expires_at") and value is not None
        else value
    )


def api_json(memory: Any) -> dict[str, Any]:
    """The Memory API's JSON of a memory (a record or a `Memory`)."""
    out = {}
    for f in FIELDS:
        if f.api is None or f.export_only:
            continue
        value = _outward(f, _value(memory, f.attr))
        if value is not None or f.always:
            out[f.api] = value
    return out


def export_line(record: Any) -> dict[str, Any]:
    """An export line: every field the record has, by its API name (a context only with its text)."""
    out = {}
    for f in FIELDS:
        if f.api is None or (f.attr == "context_author" and not record.context):
            continue
        value = _outward(f, _value(record, f.attr))
        if value is not None:
            out[f.api] = value
    return out


def payload(record: Any) -> dict[str, Any]:
    """What a point carries: enough to filter and render a hit without reading the record."""
    out = {}
    for f in FIELDS:
        if f.payload is not None:
            value = _value(record, f.attr)
            if value is not None:
                out[f.payload] = value
    return out


def from_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A point's payload back as attributes (the fields it does not carry are absent)."""
    return {f.attr: payload[f.payload] for f in FIELDS if f.payload is not None and f.payload in payload}
