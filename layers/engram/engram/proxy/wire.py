"""OpenAI and Anthropic wire formats: read user turns, inject system text, speak replies, read streams."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

Api = Literal["openai", "anthropic"]


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in ("text", "input_text")
            and isinstance(part.get("text"), str)
        )
    return ""


def user_turns(body: dict[str, Any]) -> list[str]:
    """The text of every user message, oldest first (tool results and empty turns left out)."""
    out = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            text = content_text(message.get("content")).strip()
            if text:
                out.append(text)
    return out


def last_user_text(body: dict[str, Any]) -> str:
    """The newest user message's text ('' when the last message is not from the user)."""
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "user":
        return content_text(messages[-1].get("content")).strip()
    return ""


# ----- replies the proxy speaks itself (/memory commands) ------------------------------------------


def reply_json(api: Api, model: str, text: str) -> dict[str, Any]:
    """A complete non-streaming reply in the caller's format."""
    if api == "openai":
        return {
            "id": f"chatcmpl-engram-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
    return {
        "id": f"msg_engram_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


def _sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def reply_stream(api: Api, model: str, text: str, include_usage: bool = False) -> Iterator[bytes]:
    """The same reply as a server-sent event stream in the caller's format."""
    if api == "openai":
        base = {
            "id": f"chatcmpl-engram-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        yield _sse(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
        )
        yield _sse({**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
        yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if include_usage:
            yield _sse(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                }
            )
        yield _sse("[DONE]")
        return
    message = reply_json("anthropic", model, "")
    message["content"], message["stop_reason"] = [], None
    yield _sse({"type": "message_start", "message": message}, "message_start")
    yield _sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        "content_block_start",
    )
    yield _sse(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        "content_block_delta",
    )
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield _sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 0},
        },
        "message_delta",
    )
    yield _sse({"type": "message_stop"}, "message_stop")


# ----- reading the assistant's text from what the upstream sent ---------------------------------


# How an answer ends when the model asks for tools: the turn goes on in another round
TOOL_STOPS = {"tool_calls", "function_call", "tool_use"}


def reply_stop(api: Api, body: dict[str, Any]) -> str | None:
    """Why a non-streamed answer ended (OpenAI's finish_reason, Anthropic's stop_reason)."""
    if api == "openai":
        choices = body.get("choices") or []
        return choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
    stop = body.get("stop_reason")
    return stop if isinstance(stop, str) else None


def reply_text(api: Api, body: dict[str, Any]) -> str:
    """The assistant's text in a non-streaming reply."""
    if api == "openai":
        choices = body.get("choices") or []
        return content_text((choices[0].get("message") or {}).get("content")) if choices else ""
    return content_text(body.get("content"))


def _json_object(data: bytes) -> dict[str, Any] | None:
    """An SSE event's data as a JSON object (None: empty, not JSON, or not an object)."""
    try:
        event = json.loads(data) if data else None
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class StreamCapture:
    """Follows an SSE stream chunk by chunk and keeps the assistant's text (and usage)."""

    def __init__(self, api: Api):
        self.api = api
        self._buffer = b""
        self.parts: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.finished = False  # the provider's end-of-stream event has been seen
        self.stop: str | None = None  # why the answer ended, once the provider said

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream (events may be split anywhere)."""
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            line = line.strip()
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def _event(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.finished = True
            return
        event = _json_object(data)
        if event is None:
            return
        if self.api == "openai":
            self._openai(event)
        else:
            self._anthropic(event)

    def _openai(self, event: dict[str, Any]) -> None:
        for choice in event.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if isinstance(piece, str):
                self.parts.append(piece)
            if choice.get("finish_reason"):
                self.stop = str(choice["finish_reason"])
        if event.get("usage"):
            self.usage = event["usage"]

    def _anthropic(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.parts.append(delta.get("text", ""))
        elif kind == "message_delta":
            self.usage = event.get("usage") or self.usage
            stop = (event.get("delta") or {}).get("stop_reason")
            self.stop = str(stop) if stop else self.stop
        elif kind == "message_stop":
            self.finished = True

    @property
    def ended(self) -> bool:
        """Whether the answer came to its end (not cut off: LibreChat's Stop closes the stream mid-way)."""
        return self.finished or self.stop is not None

    @property
    def text(self) -> str:
        """The assistant's text so far."""
        return "".join(self.parts)
