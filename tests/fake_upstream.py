"""A fake model provider on 127.0.0.1 that speaks OpenAI and Anthropic (streaming and not) and records
every request it receives. Its extraction answers come back in the untidy shapes small models use."""

from __future__ import annotations

import asyncio
import json
import re
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.support import ServedApp

REPLY = "Hello from the fake upstream, in three parts."
# Models that take only the default temperature, as OpenAI's o-series and gpt-5 do, and one engram cannot
# know by its name; "broken" models fail every extraction
DEFAULT_TEMPERATURE_ONLY = re.compile(r"^(o\d|gpt-5)|reasoner")
TEMPERATURE_REFUSED = {
    "error": {
        "message": "Unsupported value: 'temperature' does not support 0 with this model. Only the "
        "default (1) value is supported.",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_value",
    }
}


def _facts(exchange: str) -> list[str]:
    user = exchange.split("Assistant:")[0]
    return [
        f"The user's {m.group(1).strip()} is {m.group(2).strip().rstrip('.')}."
        for m in re.finditer(r"[Mm]y ([\w ]+?) is ([^.\n]+)", user)
    ]


def _tool_call(body: dict, api: str) -> dict | None:
    """A model that calls the `web_search` tool when it is offered and the user just spoke (an agent's first
    round), and answers in text once the tool's result is in (the next round)."""
    names = {(t.get("function") or t).get("name") for t in body.get("tools") or []}
    last = (body.get("messages") or [{}])[-1]
    results = last.get("role") == "tool" or (
        isinstance(last.get("content"), list) and any(b.get("type") == "tool_result" for b in last["content"])
    )
    if "web_search" not in names or results:
        return None
    if api == "openai":
        function = {"name": "web_search", "arguments": json.dumps({"query": "restaurants"})}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
        }
    return {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {"query": "restaurants"}}


def _gzipped(events):
    """An event stream gzip-compressed on the fly, flushed after every event."""
    import zlib

    compressor = zlib.compressobj(wbits=31)
    for event in events:
        yield compressor.compress(event.encode()) + compressor.flush(zlib.Z_SYNC_FLUSH)
    yield compressor.flush()


def _sse(data: dict) -> str:
    """One OpenAI server-sent event."""
    return f"data: {json.dumps(data)}\n\n"


def _event(kind: str, **fields: object) -> str:
    """One Anthropic server-sent event: its type named twice, as Anthropic sends it."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"


class FakeUpstream(ServedApp):
    """Start with .start(); `.requests` holds (path, headers, json) of everything received."""

    def __init__(self):
        self.requests: list[dict] = []
        self.extraction_style = "fenced"
        self.compress = False  # gzip streams when the client accepts it (as many providers' CDNs do)
        self.app = FastAPI()
        self._routes()

    def _record(self, request: Request, body: dict | None):
        # the body as it came (read by request.json() before), as text: records are dumped as JSON
        raw = getattr(request, "_body", b"").decode("utf-8", "surrogateescape")
        self.requests.append(
            {"path": request.url.path, "headers": dict(request.headers), "json": body, "raw": raw}
        )

    def chats(self) -> list[dict]:
        """Requests that were chat turns (not extraction calls)."""
        return [r for r in self.requests if r["json"] and not self.is_extraction(r["json"])]

    @staticmethod
    def is_extraction(body: dict) -> bool:
        text = json.dumps(body.get("system", "")) + json.dumps(body.get("messages", []))
        return "long-term memory about a user" in text

    def _extraction_answer(self, body: dict) -> str:
        exchange = body["messages"][-1]["content"]
        facts = _facts(exchange)
        if self.extraction_style == "fenced":
            return "Sure! Here you go:\n```json\n" + json.dumps({"memories": facts}) + "\n```"
        if self.extraction_style == "malformed":
            return "{'memories': [" + ", ".join(f"'{f}'" for f in facts) + ",]}"
        return "I could not find anything, sorry."

    def _routes(self):
        app = self.app

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self._record(request, body)
            model = str(body.get("model") or "")
            if DEFAULT_TEMPERATURE_ONLY.search(model) and body.get("temperature") not in (None, 1):
                return JSONResponse(TEMPERATURE_REFUSED, status_code=400)
            if self.is_extraction(body) and "broken" in model:
                return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, 503)
            text = self._extraction_answer(body) if self.is_extraction(body) else REPLY
            if (body.get("response_format") or {}).get("type") == "json_schema":  # structured output
                text = json.dumps({"title": "Porto Trip", "language": "English"})
            call = _tool_call(body, "openai")
            if call is not None and not body.get("stream"):  # an agent's first round: it asks for the tool
                return {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [{"index": 0, "message": call, "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
                }
            if not body.get("stream"):
                return {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
                }

            def events():
                base = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": body["model"],
                }

                def chunk(delta: dict, finish: str | None = None) -> str:
                    choice = {"index": 0, "delta": delta, "finish_reason": finish}
                    return _sse({**base, "choices": [choice]})

                if call is not None:  # the tool call, streamed as OpenAI streams one: name, then arguments
                    first = {**call["tool_calls"][0], "index": 0}
                    arguments = first["function"]["arguments"]
                    first = {**first, "function": {"name": "web_search", "arguments": ""}}
                    yield chunk({"role": "assistant", "content": None, "tool_calls": [first]})
                    yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})
                    yield chunk({}, "tool_calls")
                else:
                    yield chunk({"role": "assistant", "content": ""})
                    for part in re.findall(r"\S+\s*", text):
                        yield chunk({"content": part})
                    yield chunk({}, "stop")
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}
                    yield _sse({**base, "choices": [], "usage": usage})
                yield "data: [DONE]\n\n"

            if model.startswith("slow"):  # a long answer, a word a second: time for the user to press Stop

                async def slowly():
                    for event in events():
                        yield event
                        await asyncio.sleep(1)

                return StreamingResponse(slowly(), media_type="text/event-stream")
            if self.compress and "gzip" in request.headers.get("accept-encoding", ""):
                return StreamingResponse(
                    _gzipped(events()),
                    media_type="text/event-stream",
                    headers={"x-fake": "yes", "content-encoding": "gzip"},
                )
            return StreamingResponse(events(), media_type="text/event-stream", headers={"x-fake": "yes"})

        @app.post("/v1/messages")
        async def messages(request: Request):
            body = await request.json()
            self._record(request, body)
            text = self._extraction_answer(body) if self.is_extraction(body) else REPLY
            call = _tool_call(body, "anthropic")
            message = {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [call] if call else [{"type": "text", "text": text}],
                "stop_reason": "tool_use" if call else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 9},
            }
            if not body.get("stream"):
                return message

            def events():
                start = {**message, "content": [], "stop_reason": None}
                yield _event("message_start", message=start)
                yield _event("content_block_start", index=0, content_block={"type": "text", "text": ""})
                for part in re.findall(r"\S+\s*", text):
                    yield _event("content_block_delta", index=0, delta={"type": "text_delta", "text": part})
                yield _event("content_block_stop", index=0)
                stop = {"stop_reason": "end_turn", "stop_sequence": None}
                yield _event("message_delta", delta=stop, usage={"output_tokens": 9})
                yield _event("message_stop")

            return StreamingResponse(events(), media_type="text/event-stream")

        @app.get("/v1/models")
        async def models(request: Request):
            self._record(request, None)
            return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

        @app.post("/v1/fail")
        async def fail(request: Request):
            self._record(request, None)
            return JSONResponse(
                {"error": {"message": "quota exceeded"}}, status_code=429, headers={"retry-after": "7"}
            )

        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
        async def anything(path: str, request: Request):  # everything else on the host: recorded
            self._record(request, None)
            return {"path": "/" + path}
