"""A typed client of the Memory API, sync (`Engram`) and async (`AsyncEngram`), on httpx.

    from engram.client import Engram
    with Engram("http://127.0.0.1:8710", "your-admin-key") as engram:
        engram.add("mybot", "The owner drinks green tea.", user="alice")
        for memory in engram.search("mybot", "favourite beverage", user="alice"):
            print(memory.id, memory.text, memory.score)

Both classes share one description of each call (`Call`) and one reading of each answer, so they cannot
drift apart; each call is the Memory API's route of the same name (docs/memory-api.md)."""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict

Kind = Literal["fact", "message"]
TIMEOUT_S = 30.0


class Memory(BaseModel):
    """A memory as the API answers it (fields the client does not know yet are kept, not refused)."""

    model_config = ConfigDict(extra="allow")
    id: str
    text: str
    kind: str = "fact"
    userId: str | None = None
    serverId: str | None = None
    project: str | None = None
    createdAt: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None


class Page(BaseModel):
    """A listing's page, or a search's results (`meaning`: whether meaning took part)."""

    memories: list[Memory]
    next: str | None = None
    meaning: bool | None = None

    def __iter__(self) -> Iterator[Memory]:  # type: ignore[override]  # a page iterates its memories
        return iter(self.memories)

    def __len__(self) -> int:
        return len(self.memories)


class UserKey(BaseModel):
    """One of a user's keys; `key` only in the answer that minted it."""

    id: str
    bot: str
    userId: str
    name: str | None = None
    createdAt: str
    key: str | None = None


class EngramError(Exception):
    """The API refused: its problem details (status, engram's code, what went wrong)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


@dataclass(frozen=True)
class Call:
    """One request: method, path, query, JSON or raw body."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None

    def send_args(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if v is not None}
        args: dict[str, Any] = {"params": params}
        if self.json is not None:
            args["json"] = self.json
        if self.content is not None:
            args["content"] = self.content
            args["headers"] = {"content-type": "application/x-ndjson"}
        return args


def _scope(user: str | None, server: str | None, project: str | None) -> dict[str, Any]:
    return {"userId": user, "serverId": server, "project": project}


def checked(response: httpx.Response) -> httpx.Response:
    """The response, or EngramError from its problem details (or from its status, when it has none)."""
    if response.is_success:
        return response
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = body.get("detail") or response.text or response.reason_phrase
    raise EngramError(response.status_code, str(body.get("code") or "error"), str(detail))


class Calls:
    """Every call the clients make, as data (no I/O here)."""

    @staticmethod
    def search(  # noqa: PLR0913 - the API's query parameters, by name
        bot: str,
        query: str,
        *,
        user: str | None = None,
        server: str | None = None,
        project: str | None = None,
        kind: Kind = "fact",
        limit: int | None = None,
        min_score: float | None = None,
        asked_by: str | None = None,
    ) -> Call:
        params = {"query": query, "kind": kind, "limit": limit, "minScore": min_score, "askedBy": asked_by}
        return Call("GET", f"/v1/bots/{bot}/memories", {**params, **_scope(user, server, project)})

    @staticmethod
    def list(  # noqa: PLR0913 - the API's query parameters, by name
        bot: str,
        *,
        user: str | None = None,
        server: str | None = None,
        project: str | None = None,
        kind: Kind = "fact",
        limit: int | None = None,
        before: str | None = None,
    ) -> Call:
        params = {"kind": kind, "limit": limit, "before": before}
        return Call("GET", f"/v1/bots/{bot}/memories", {**params, **_scope(user, server, project)})

    @staticmethod
    def add(
        bot: str,
        text: str,
        *,
        user: str | None = None,
        server: str | None = None,
        project: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Call:
        body = {"text": text, **_scope(user, server, project), "metadata": metadata}
        return Call("POST", f"/v1/bots/{bot}/memories", json={k: v for k, v in body.items() if v is not None})


def _export(bot: str, user: str | None) -> Call:
    return Call("GET", f"/v1/bots/{bot}/export", {"userId": user})


def _import(bot: str, lines: Iterable[str | dict[str, Any]]) -> Call:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    return Call("POST", f"/v1/bots/{bot}/import", content=text.encode("utf-8"))


def _keys(bot: str, user: str) -> str:
    return f"/v1/bots/{bot}/users/{user}/keys"


class Engram:
    """The Memory API, synchronously. `url` is the stack's base URL; `api_key` the admin key (or the proxy
    key, which reads its own bot)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        return checked(self._http.request(call.method, call.path, **call.send_args()))

    def search(self, bot: str, query: str, **options: Any) -> Page:
        """Memories best first by words and meaning (options: user, server, project, kind, limit,
        min_score, asked_by)."""
        return Page.model_validate(self._send(Calls.search(bot, query, **options)).json())

    def list(self, bot: str, **options: Any) -> Page:
        """A page of memories newest first (options: user, server, project, kind, limit, before)."""
        return Page.model_validate(self._send(Calls.list(bot, **options)).json())

    def all(self, bot: str, **options: Any) -> Iterator[Memory]:
        """Every memory newest first, page after page."""
        before = options.pop("before", None)
        while True:
            page = self.list(bot, before=before, **options)
            yield from page
            if not page.next:
                return
            before = page.next

    def add(self, bot: str, text: str, **options: Any) -> Memory:
        """Remember a fact (options: user, server, project, metadata); the same text again answers the
        memory already there."""
        return Memory.model_validate(self._send(Calls.add(bot, text, **options)).json())

    def get(self, bot: str, memory_id: str) -> Memory:
        return Memory.model_validate(self._send(Call("GET", f"/v1/bots/{bot}/memories/{memory_id}")).json())

    def update(self, bot: str, memory_id: str, text: str) -> Memory:
        call = Call("PATCH", f"/v1/bots/{bot}/memories/{memory_id}", json={"text": text})
        return Memory.model_validate(self._send(call).json())

    def remove(self, bot: str, memory_id: str) -> None:
        self._send(Call("DELETE", f"/v1/bots/{bot}/memories/{memory_id}"))

    def forget(self, bot: str, user: str) -> dict[str, Any]:
        """Everything of a user's in this bot, gone (what went, per store)."""
        return dict(self._send(Call("DELETE", f"/v1/bots/{bot}/users/{user}/memories")).json())

    def export(self, bot: str, user: str | None = None) -> Iterator[str]:
        """The bot's (or a user's) records as NDJSON lines, streamed."""
        call = _export(bot, user)
        with self._http.stream(call.method, call.path, **call.send_args()) as response:
            if not response.is_success:
                response.read()
                checked(response)
            yield from (line for line in response.iter_lines() if line)

    def import_(self, bot: str, lines: Iterable[str | dict[str, Any]]) -> dict[str, Any]:
        """Store an export's lines into this bot (what was stored, skipped, and refused by line)."""
        return dict(self._send(_import(bot, lines)).json())

    def bots(self) -> builtins.list[str]:
        return [str(b) for b in self._send(Call("GET", "/v1/bots")).json()["bots"]]

    def mint_key(self, bot: str, user: str, name: str | None = None) -> UserKey:
        """A key for one user of one bot (its secret in `.key`, this once)."""
        return UserKey.model_validate(self._send(Call("POST", _keys(bot, user), json={"name": name})).json())

    def keys(self, bot: str, user: str) -> builtins.list[UserKey]:
        return [UserKey.model_validate(k) for k in self._send(Call("GET", _keys(bot, user))).json()["keys"]]

    def revoke_key(self, bot: str, user: str, key_id: str) -> None:
        self._send(Call("DELETE", f"{_keys(bot, user)}/{key_id}"))


class AsyncEngram:
    """The Memory API, asynchronously: the same calls as `Engram`, awaited."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        return checked(await self._http.request(call.method, call.path, **call.send_args()))

    async def search(self, bot: str, query: str, **options: Any) -> Page:
        return Page.model_validate((await self._send(Calls.search(bot, query, **options))).json())

    async def list(self, bot: str, **options: Any) -> Page:
        return Page.model_validate((await self._send(Calls.list(bot, **options))).json())

    async def all(self, bot: str, **options: Any) -> AsyncIterator[Memory]:
        before = options.pop("before", None)
        while True:
            page = await self.list(bot, before=before, **options)
            for memory in page:
                yield memory
            if not page.next:
                return
            before = page.next

    async def add(self, bot: str, text: str, **options: Any) -> Memory:
        return Memory.model_validate((await self._send(Calls.add(bot, text, **options))).json())

    async def get(self, bot: str, memory_id: str) -> Memory:
        call = Call("GET", f"/v1/bots/{bot}/memories/{memory_id}")
        return Memory.model_validate((await self._send(call)).json())

    async def update(self, bot: str, memory_id: str, text: str) -> Memory:
        call = Call("PATCH", f"/v1/bots/{bot}/memories/{memory_id}", json={"text": text})
        return Memory.model_validate((await self._send(call)).json())

    async def remove(self, bot: str, memory_id: str) -> None:
        await self._send(Call("DELETE", f"/v1/bots/{bot}/memories/{memory_id}"))

    async def forget(self, bot: str, user: str) -> dict[str, Any]:
        return dict((await self._send(Call("DELETE", f"/v1/bots/{bot}/users/{user}/memories"))).json())

    async def export(self, bot: str, user: str | None = None) -> AsyncIterator[str]:
        call = _export(bot, user)
        async with self._http.stream(call.method, call.path, **call.send_args()) as response:
            if not response.is_success:
                await response.aread()
                checked(response)
            async for line in response.aiter_lines():
                if line:
                    yield line

    async def import_(self, bot: str, lines: Iterable[str | dict[str, Any]]) -> dict[str, Any]:
        return dict((await self._send(_import(bot, lines))).json())

    async def bots(self) -> builtins.list[str]:
        return [str(b) for b in (await self._send(Call("GET", "/v1/bots"))).json()["bots"]]

    async def mint_key(self, bot: str, user: str, name: str | None = None) -> UserKey:
        call = Call("POST", _keys(bot, user), json={"name": name})
        return UserKey.model_validate((await self._send(call)).json())

    async def keys(self, bot: str, user: str) -> builtins.list[UserKey]:
        answer = (await self._send(Call("GET", _keys(bot, user)))).json()
        return [UserKey.model_validate(k) for k in answer["keys"]]

    async def revoke_key(self, bot: str, user: str, key_id: str) -> None:
        await self._send(Call("DELETE", f"{_keys(bot, user)}/{key_id}"))
