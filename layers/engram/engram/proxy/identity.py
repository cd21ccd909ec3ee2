"""A user's key on the proxy and /mcp: the key says who the caller is. Before any route runs, a request
showing a valid user key of the proxy's bot gets that user as its identity header (whatever the caller
put there is dropped: a key of one user never speaks for another) and the key in its scope, which is what
lets it through the doors (relay.open_door, mcp_tools.MCPEndpoint). The Memory API (/v1) is not a door a
user key opens."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..access_keys import looks_like_user_key
from ..bookkeeping import UserKey

if TYPE_CHECKING:
    from .runtime import Proxy

SCOPE_KEY = "engram.user_key"


def presented_token(headers: Headers) -> str | None:
    """The key a caller showed: engram's header, a bearer token, or Anthropic's x-api-key."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return headers.get("x-engram-key") or bearer or headers.get("x-api-key")


def user_key_of(scope: Scope) -> UserKey | None:
    """The user key this request was let in with (None: none, or not a valid one)."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, UserKey) else None


class UserKeyIdentity:
    """Sets a user key's user as the identity of the proxy's and /mcp's requests."""

    def __init__(self, app: ASGIApp, proxy_factory: Callable[[], Proxy]) -> None:
        self.app = app
        self.proxy_factory = proxy_factory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/v1/"):
            token = presented_token(Headers(scope=scope))
            if looks_like_user_key(token):
                proxy = self.proxy_factory()
                key = await run_in_threadpool(proxy.user_key, token)
                if key is not None:
                    s = proxy.settings
                    scope = with_identity(scope, s.user_header, key, (s.user_name_header, s.username_header))
        await self.app(scope, receive, send)


def with_identity(scope: Scope, user_header: str, key: UserKey, name_headers: tuple[str, ...]) -> Scope:
    """The scope with the key's user as the identity header, and the key itself. The names a client sends
    beside a user key are dropped: LibreChat fills them in under the proxy key, but a key's holder could
    call themselves anyone, and a question naming that person would favour what the holder said."""
    name = user_header.lower().encode("latin-1")
    dropped = {name, *(h.lower().encode("latin-1") for h in name_headers)}
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in dropped]
    headers.append((name, key.user.encode("utf-8")))
    return {**scope, "headers": headers, SCOPE_KEY: key}
