"""The Memory API app: list, search, add, change, remove and forget memories over HTTP, with the
LibreChat proxy, MCP and Discord's webhook mounted beside it. Routes live in routers/, bodies in
schemas.py, what they share in deps.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY, RequestBodyLimitMiddleware
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..engine_parts import Engine
from ..errors import EngramError
from ..keys import key_matches
from ..problems import PROBLEM_JSON, in_anthropic_shape, problem
from ..text import MEMORY_ID_PATTERN, NAME_PATTERN
from .deps import NOT_ADMIN, error_response
from .routers import discord, index, keys, memories, ops, settings

log = logging.getLogger(__name__)
MCP_BODY = 1024 * 1024
ERROR_SCHEMA = "#/components/schemas/ErrorResponse"


class LazyASGI:
    """An ASGI app built on its first request: the MCP SDK's import alone costs ~0.3 s of every cold
    start, and most invocations never touch /mcp."""

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)


class AdminKeyBeforeBody:
    """Memory API requests (/v1/...) without the admin key are refused before anything reads their body:
    FastAPI reads and parses a body before it runs a route's dependencies."""

    def __init__(
        self,
        app: ASGIApp,
        expected_key: Callable[[], str | None],
        reader_key: Callable[[str], bool] | None = None,
    ) -> None:
        self.app = app
        self.expected_key = expected_key
        # A GET has no body to protect: a reader's key (the proxy key) goes on to the route, which decides.
        self.reader_key = reader_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        scheme, _, token = (Headers(scope=scope).get("authorization") or "").partition(" ")
        try:
            expected = await run_in_threadpool(self.expected_key)
        except EngramError as exc:
            await error_response(exc.status, exc.code, exc.message)(scope, receive, send)
            return
        bearer = scheme.lower() == "bearer"
        if (bearer and key_matches(token, expected)) or (bearer and await self._reads_with(scope, token)):
            await self.app(scope, receive, send)
            return
        await error_response(401, "unauthorized", NOT_ADMIN)(scope, receive, send)

    async def _reads_with(self, scope: Scope, token: str) -> bool:
        """Whether a GET (or HEAD) comes with a reader's key: the route decides what it may read."""
        reader = self.reader_key if scope["method"] in ("GET", "HEAD") else None
        return reader is not None and bool(await run_in_threadpool(reader, token))


def too_large(scope: Scope) -> str:
    """The 413 message, naming the limit of the route (in the scope while the limit is in force)."""
    limit = scope.get(MAX_BODY_SIZE_SCOPE_KEY)
    return (
        f"the request body is larger than the {limit:,} bytes this route accepts"
        if limit
        else "the request body is too large"
    )


def too_large_answer(scope: Scope) -> dict[str, Any]:
    """The 413's problem body, its `error` member in Anthropic's shape on the proxy's Messages route (its
    SDK reads `error.type`), engram's everywhere else."""
    body = problem(413, "too_large", too_large(scope))
    if str(scope.get("path", "")).endswith("/v1/messages"):
        return in_anthropic_shape(body, "request_too_large")
    return body


class JsonTooLarge:
    """Starlette's body limit answers a too-long content-length with 413 in plain text from inside the
    route; engram answers every error as problem details, naming the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replacing = False

        async def send_json(message: Message) -> None:
            nonlocal replacing
            if (
                message["type"] == "http.response.start"
                and message["status"] == 413
                and dict(message.get("headers") or []).get(b"content-type", b"").startswith(b"text/plain")
            ):
                replacing = True
                body = json.dumps(too_large_answer(scope)).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", PROBLEM_JSON.encode()),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
            if replacing:  # the plain-text body that followed: already answered
                return
            await send(message)

        await self.app(scope, receive, send_json)


def api_docs_enabled() -> bool:
    """API docs (/docs, /redoc, /openapi.json): on locally, off on Lambda unless ENGRAM_API_DOCS=true."""
    from ..config import get_settings

    settings = get_settings()
    return settings.api_docs if settings.api_docs is not None else not settings.runtime.on_lambda


# What a documented pattern means, in words, for the error message.
PATTERNS_IN_WORDS = {
    NAME_PATTERN: "1-128 letters, digits or _.:@- starting with a letter or digit",
    MEMORY_ID_PATTERN: "a memory id such as 12 or mem:12",
}


def allowed_methods(request: Request) -> str:
    """Every method some route of this path takes (Starlette's 405 names only the first route's): each
    method asked of the app's routes as a request of its own would be."""
    from starlette.routing import Match

    def taken(method: str) -> bool:
        scope = {**request.scope, "method": method}
        return any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes)

    return ", ".join(m for m in ("GET", "POST", "PUT", "PATCH", "DELETE") if taken(m))


def _http_detail(request: Request, exc: StarletteHTTPException) -> str:
    """Starlette's bare "Not Found" and "Method Not Allowed" said for this request."""
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 404 and exc.detail == "Not Found":
        return (
            f"no route {where}: the Memory API's routes are under /v1/bots/... (see /docs or /openapi.json)"
        )
    if exc.status_code == 405:
        return f"{request.method} is not allowed on {request.url.path}; it takes {allowed_methods(request)}"
    return str(exc.detail)


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":  # FastAPI's loc is ("body", <character offset>)
            offset = (err.get("loc") or ("body", "?"))[-1]
            reason = (err.get("ctx") or {}).get("error", "")
            parts.append(f"the body is not valid JSON (at character {offset}: {reason})".replace(": )", ")"))
            continue
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",)) or "body"
        pattern = (err.get("ctx") or {}).get("pattern")
        message = (
            f"must be {PATTERNS_IN_WORDS[pattern]}"
            if pattern in PATTERNS_IN_WORDS
            else err.get("msg", "invalid")
        )
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The document as the server answers: validation errors are 400 with engram's error body (FastAPI
    documents 422 on every route)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        for operations in doc.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if responses.pop("422", None) is not None:
                    responses.setdefault("400", {"description": "Bad input", "content": {}})
                for status, answer in responses.items():
                    if status[:1] in ("4", "5"):  # errors are problem details (engram.problems)
                        answer["content"] = {PROBLEM_JSON: {"schema": {"$ref": ERROR_SCHEMA}}}
        for unused in ("HTTPValidationError", "ValidationError"):
            doc.get("components", {}).get("schemas", {}).pop(unused, None)
        app.openapi_schema = doc
        return doc

    return build


def add_docs_pages(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc with their scripts, styles and icon served by engram (the assets
    fastapi-offline ships): FastAPI's own pages load them from a CDN and Google Fonts, blank offline."""
    import fastapi_offline
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from starlette.staticfiles import StaticFiles

    assets = Path(fastapi_offline.__file__).resolve().parent / "static"
    # Nothing from another host, as a rule the browser keeps: ReDoc's bundle draws Redocly's logo from its
    # CDN whatever the options (the image is simply left out: ReDoc hides it when it cannot load)
    only_engram = {
        "content-security-policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
        "font-src 'self' data:"
    }
    app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}/docs-assets/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs-assets/swagger-ui.css",
            swagger_favicon_url=f"{root}/favicon.ico",
            # no validator badge: Swagger UI would load it from validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers.update(only_engram)
        return page

    @app.get("/redoc", include_in_schema=False)
    def redoc_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}/openapi.json",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}/docs-assets/redoc.standalone.js",
            redoc_favicon_url=f"{root}/favicon.ico",
            with_google_fonts=False,
        )
        page.headers.update(only_engram)
        return page


def create_app(
    engine_factory: Callable[[], Engine],
    proxy_factory: Callable[..., Any] | None = None,
    discord_settings_factory: Callable[..., Any] | None = None,
) -> FastAPI:
    """The Memory API app, with the LibreChat proxy and MCP endpoint mounted when `proxy_factory` is
    given; factories are looked up per request so tests and the local stack can wire them."""
    docs = api_docs_enabled()
    app = FastAPI(
        title="engram Memory API",
        version=__version__,
        description="Long-term memory for chat bots: list, search, add, change, remove and forget memories.",
        openapi_url="/openapi.json" if docs else None,
        docs_url=None,  # both pages are served below, with their assets from the package
        redoc_url=None,
        # operationId = the route's function name: generated clients get list_memories, not
        # list_memories_v1_bots_bot_memories_get
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.engine_factory = engine_factory
    app.state.proxy_factory = proxy_factory
    app.state.discord_settings_factory = discord_settings_factory
    app.openapi = _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    app.add_middleware(
        AdminKeyBeforeBody,
        expected_key=lambda: engine_factory().api_key(),
        reader_key=(lambda token: proxy_factory().key_matches(token)) if proxy_factory else None,
    )
    app.add_middleware(JsonTooLarge)

    @app.exception_handler(EngramError)
    async def engram_error(_: Request, exc: EngramError) -> Response:
        if exc.status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(400, "invalid", _describe(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 413:  # a body that streamed past the limit (no content-length to refuse it by)
            return JSONResponse(too_large_answer(request.scope), status_code=413, media_type=PROBLEM_JSON)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "error")
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        if exc.status_code == 405:
            headers["allow"] = allowed_methods(request)
        return error_response(exc.status_code, code, _http_detail(request, exc), headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:  # a bug: say so without details, log them
        log.exception("unexpected error")
        return error_response(500, "internal", "something went wrong inside engram; it has been logged")

    for module in (ops, memories, keys, settings, index, discord):
        app.include_router(module.router)
    if docs:
        add_docs_pages(app)

    # The memory page: three static files in the package (no build step, nothing from a CDN); it holds
    # no data itself and calls the Memory API with the key the person signs in with.
    from fastapi.responses import FileResponse
    from starlette.staticfiles import StaticFiles

    page = Path(__file__).resolve().parent / "page"
    app.mount("/page", StaticFiles(directory=page), name="page")

    @app.get("/", include_in_schema=False)
    def memory_page() -> FileResponse:
        return FileResponse(page / "index.html", headers={"cache-control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:  # what a browser asks for on a page without a <link rel=icon>
        return FileResponse(page / "favicon.svg", media_type="image/svg+xml")

    if proxy_factory is not None:
        from ..proxy.routes import proxy_router

        def build_mcp() -> ASGIApp:
            from ..proxy.mcp_tools import MCPEndpoint

            return RequestBodyLimitMiddleware(MCPEndpoint(proxy_factory), max_body_size=MCP_BODY)

        from ..proxy.identity import UserKeyIdentity

        app.add_middleware(UserKeyIdentity, proxy_factory=proxy_factory)
        endpoint = LazyASGI(build_mcp)
        # Starlette's Route runs a non-function endpoint as an ASGI app; add_route's hint names only functions
        for path in ("/mcp", "/mcp/"):
            app.add_route(path, endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)  # type: ignore[arg-type]
        app.include_router(proxy_router(proxy_factory))
    return app
