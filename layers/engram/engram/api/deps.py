"""What the Memory API's routes share: the engine, the admin key check, error bodies, body limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..engine_parts import Engine
from ..errors import Unauthorized
from ..keys import key_matches
from ..problems import problem_response
from ..text import NAME_PATTERN
from .schemas import ErrorResponse

# Body limits per route, checked while the body streams in (413 beyond them).
SMALL_BODY = 64 * 1024  # a fact, a change, settings, a Discord interaction
MESSAGES_BODY = 6 * 1024 * 1024  # 500 chat messages; Lambda's own request limit is 6 MB

ADMIN_KEY = HTTPBearer(
    auto_error=False,
    scheme_name="adminKey",
    description="The Memory API's admin key (ENGRAM_API_KEY): every /v1 route. "
    "The proxy key (ENGRAM_PROXY_KEY) may only read its own bot: GET /v1/bots, "
    "its memories (list, search, one, export).",
)

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Bad input"},
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer key"},
    413: {"model": ErrorResponse, "description": "The body is larger than this route accepts"},
    503: {"model": ErrorResponse, "description": "A dependency is down; nothing was changed"},
}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """Every error answer: RFC 9457 problem details (engram.problems), a 401 with WWW-Authenticate."""
    response: JSONResponse = problem_response(status, code, message, headers=headers)
    return response


def engine(request: Request) -> Engine:
    """The process's engine, with embedder settings another process may have changed."""
    eng: Engine = request.app.state.engine_factory()
    eng.refresh()
    return eng


NOT_ADMIN = "missing or wrong bearer key (the Memory API takes the admin key, ENGRAM_API_KEY)"


def holds_admin_key(credentials: HTTPAuthorizationCredentials | None, eng: Engine) -> bool:
    """Whether the bearer credentials are the admin key."""
    return credentials is not None and key_matches(credentials.credentials, eng.api_key())


def require_admin(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(ADMIN_KEY)],
    eng: Annotated[Engine, Depends(engine)],
) -> Engine:
    """The engine, for a caller holding the admin key; else 401."""
    if not holds_admin_key(credentials, eng):
        raise Unauthorized(NOT_ADMIN)
    return eng


Admin = Annotated[Engine, Depends(require_admin)]
# Bot, user, server and project names (what service.check_name enforces), documented as such.
Bot = Annotated[str, Path(description="The bot whose memories these are.", pattern=NAME_PATTERN)]


def proxy_key_bot(request: Request, token: str | None) -> str | None:
    """The one bot the proxy key may read — the proxy's own — when `token` is the proxy key."""
    factory = getattr(request.app.state, "proxy_factory", None)
    if factory is None or not token:
        return None
    proxy = factory()
    return proxy.settings.bot if proxy.key_matches(token) else None


@dataclass(frozen=True)
class Access:
    """Who may read what: the admin key every bot (`bots` None), the proxy key only its own bot."""

    engine: Engine
    bots: frozenset[str] | None

    def check(self, bot: str) -> None:
        """401 for a bot this key may not read."""
        if self.bots is not None and bot not in self.bots:
            raise Unauthorized("the proxy key reads only the memories of its own bot")


def require_reader(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(ADMIN_KEY)],
    eng: Annotated[Engine, Depends(engine)],
) -> Access:
    """Reading memories: the admin key, or the proxy key for the proxy's own bot; else 401."""
    if holds_admin_key(credentials, eng):
        return Access(eng, None)
    bot = proxy_key_bot(request, credentials.credentials if credentials else None)
    if bot is None:
        raise Unauthorized(NOT_ADMIN)
    return Access(eng, frozenset({bot}))


Reader = Annotated[Access, Depends(require_reader)]
