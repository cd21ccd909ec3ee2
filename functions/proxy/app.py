"""Streaming proxy function: the same app as the HTTP function, served by uvicorn behind the Lambda Web
Adapter so a Function URL in RESPONSE_STREAM mode relays tokens as they come."""

from engram.api.app import create_app
from engram.proxy.runtime import get_proxy

app = create_app(proxy_factory=get_proxy)
