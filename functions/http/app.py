"""HTTP function: the Memory API, the LibreChat proxy and /mcp on API Gateway (HTTP API) through Mangum.
Mangum buffers streamed replies; the streaming proxy function serves the same app with token streaming."""

from mangum import Mangum

from engram.api.app import create_app
from engram.engine import get_engine
from engram.observability import instrumented
from engram.proxy.runtime import get_proxy

asgi = Mangum(create_app(get_engine, proxy_factory=get_proxy), lifespan="off")


@instrumented
def handler(event, context):
    """API Gateway HTTP API event in, the app's answer out."""
    return asgi(event, context)
