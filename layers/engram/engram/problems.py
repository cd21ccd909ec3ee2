"""Error answers as RFC 9457 problem details (`application/problem+json`), the one shape every door
answers its own errors in: `type`, `title`, `status`, `detail` and engram's `code`.

Each body also keeps the member clients read before 1.3 (`error`: engram's `{code, message}`, or the
proxy caller's wire shape, which OpenAI's and Anthropic's SDKs read): RFC 9457 allows extension members,
and keeping it makes the change a minor version (CHANGELOG.md)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

PROBLEM_JSON = "application/problem+json"
# RFC 9457 3.1.1: a type URI need not resolve; a tag URI (RFC 4151) names the problem without
# promising a page. docs/memory-api.md lists every code.
TYPE_PREFIX = "tag:engram-recall,2026:problem:"


def title_of(status: int) -> str:
    """The status's reason phrase: the same title for every occurrence of a status."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(status: int, code: str, detail: str, legacy: Any = None) -> dict[str, Any]:
    """A problem body. `legacy` is the pre-1.3 `error` member (engram's `{code, message}` by default; the
    proxy's is the caller's wire shape, the Discord door's a bare string)."""
    return {
        "type": TYPE_PREFIX + code,
        "title": title_of(status),
        "status": status,
        "detail": detail,
        "code": code,
        "error": legacy if legacy is not None else {"code": code, "message": detail},
    }


def in_anthropic_shape(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """A problem on Anthropic's Messages route: Anthropic's error shape (`{"type": "error", "error":
    {"type", "message"}}`), which its clients read, with the problem's other members beside it. Its `type`
    stays "error" (a relative URI reference, so still a problem's `type`, if not a telling one)."""
    return {**body, "type": "error", "error": {"type": kind, "message": body["detail"]}}


def auth_challenge(status: int, realm: str = "engram") -> dict[str, str]:
    """On a 401, the scheme to authenticate with (RFC 9110 11.6.1: a 401 MUST carry WWW-Authenticate)."""
    return {"www-authenticate": f'Bearer realm="{realm}"'} if status == 401 else {}


def problem_headers(status: int, realm: str = "engram") -> dict[str, str]:
    """Headers a problem answer carries: its media type and, on a 401, the challenge."""
    return {"content-type": PROBLEM_JSON, **auth_challenge(status, realm)}


def problem_response(
    status: int,
    code: str,
    detail: str,
    legacy: Any = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """The problem as a Starlette response (imported here: the Discord function answers without Starlette)."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        problem(status, code, detail, legacy),
        status_code=status,
        headers={**auth_challenge(status), **(headers or {})},
        media_type=PROBLEM_JSON,
    )
