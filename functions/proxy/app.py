"""Streaming proxy function: the same app as the HTTP function, served by uvicorn behind the Lambda Web
Adapter so a Function URL in RESPONSE_STREAM mode relays tokens as they come."""

import json

from engram.api.app import create_app
from engram.engine import get_engine
from engram.observability import flush_metrics, logger
from engram.proxy.runtime import get_proxy

app = create_app(get_engine, proxy_factory=get_proxy)


@app.middleware("http")
async def lambda_context_and_metrics(request, call_next):
    """The web adapter passes the Lambda context as a header: log with it, and publish the request's
    metrics when it is answered (there is no handler to wrap here)."""
    try:
        context = json.loads(request.headers.get("x-amzn-lambda-context") or "{}")
    except ValueError:
        context = {}
    logger.append_keys(function_request_id=context.get("request_id"))
    try:
        return await call_next(request)
    finally:
        flush_metrics()
