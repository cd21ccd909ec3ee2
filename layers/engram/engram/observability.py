"""Logs, traces and metrics the same way in every handler (Powertools): JSON logs carrying the Lambda
context, X-Ray traces, and CloudWatch metrics (EMF) in one namespace — cold starts and phase timings.
Outside Lambda (make run, tests) metrics are not collected and traces are off."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit

# POWERTOOLS_SERVICE_NAME (the template's "engram"), POWERTOOLS_LOG_LEVEL; "engram" where it is not set, not
# Powertools' "service_undefined"
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "engram")
metrics = Metrics()  # POWERTOOLS_METRICS_NAMESPACE

# Logs keep no person: httpx and httpcore log every request's whole URL at INFO (member and message ids,
# an interaction's live token, links from someone's messages, a memory's words in a query string), and a
# forget cannot reach a log. Their warnings and errors (no URL) still come through.
QUIET_LOGGERS = ("httpx", "httpcore")
for _name in QUIET_LOGGERS:
    logging.getLogger(_name).setLevel(logging.WARNING)


# Per-call chatter of libraries engram serves through: the MCP SDK logs each request and session at INFO
CHATTY_LOGGERS = (
    "mcp",
    "sentence_transformers",
    "botocore.credentials",  # "Found credentials in environment variables", each client
    "pynamodb.settings",  # "Override settings for pynamo not available", each process
)


def configure_local_logging(text: bool | None = None) -> None:
    """The local stack's logs in the format the functions log in on AWS: one JSON object a line
    (Powertools' formatter, service "engram"), every logger (uvicorn's, dynalite's lines, the worker's)
    through it; plain lines with ENGRAM_LOG_FORMAT=text. No progress bars (a model's download or batches
    bar is not a log line); per-call chatter at DEBUG."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    for progress in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        os.environ.setdefault(progress, "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if text is None:
        text = os.environ.get("ENGRAM_LOG_FORMAT", "json").lower() == "text"
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        if text
        else LambdaPowertoolsFormatter(service=logger.service, location="%(name)s:%(lineno)d")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("POWERTOOLS_LOG_LEVEL", "INFO").upper())
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # the worker's Powertools logger writes through the same handler (not a second format of its own)
    underlying = logging.getLogger(logger.name)
    underlying.handlers[:] = []
    underlying.propagate = True


@lru_cache(maxsize=1)
def metrics_on() -> bool:
    """Whether metrics are collected: the template sets the namespace; without it (locally) nothing would
    flush what is collected."""
    from .config import get_settings

    settings = get_settings()
    on = bool(settings.runtime.metrics_namespace)
    if on and settings.stage:
        metrics.set_default_dimensions(stage=settings.stage)
    return on


_tracer: Tracer | None = None


def tracer() -> Tracer:
    """The X-Ray tracer, made on first use (it imports the X-Ray SDK: ~0.2 s of a cold start). Only the
    clients engram uses are patched: patching everything the SDK knows imports pymongo and more (+0.1 s)."""
    global _tracer
    if _tracer is None:
        host_only_urls()
        _tracer = Tracer(patch_modules=("botocore", "httpx"))
    return _tracer


def host_only_urls() -> None:
    """X-Ray keeps the URL of every outgoing request for 30 days; a path can be a user's link or an
    attachment's name, which a forget cannot reach there: only scheme, host and port are recorded."""
    from urllib.parse import urlsplit

    from aws_xray_sdk.core.models import http
    from aws_xray_sdk.core.models.entity import Entity

    if getattr(Entity.put_http_meta, "host_only", False):
        return
    original = Entity.put_http_meta

    def put_http_meta(self: Any, key: str, value: Any) -> Any:
        if key == http.URL and isinstance(value, str):
            parts = urlsplit(value)
            value = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        return original(self, key, value)

    put_http_meta.host_only = True  # type: ignore[attr-defined]
    Entity.put_http_meta = put_http_meta


def _engram_logs_as_json() -> None:
    """engram's own loggers (logging.getLogger(__name__)) write through the Powertools formatter."""
    logging.getLogger("engram")
    copy_config_to_registered_loggers(source_logger=logger, include={"engram"})


def instrumented(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A Lambda handler with the Lambda context in every log line, an X-Ray trace, and its metrics
    (a cold start counted) flushed at the end of each invocation."""
    # No bodies in traces: a handler's response (a list, an export) and an error's text can carry memory
    # text, which a forget could not reach inside X-Ray
    return logger.inject_lambda_context(
        tracer().capture_lambda_handler(_measured(handler), capture_response=False, capture_error=False)
    )


def instrumented_untraced(handler: Callable[..., Any]) -> Callable[..., Any]:
    """As `instrumented`, without X-Ray: for Discord's interactions, which must answer within 3 s cold start
    included, and whose trace would be a signature check and a queue send (the SDK's import was ~0.2 s)."""
    return logger.inject_lambda_context(_measured(handler))


def _measured(handler: Callable[..., Any]) -> Callable[..., Any]:
    from .config import get_settings

    if get_settings().runtime.on_lambda:  # locally (the stack's worker) logs stay as they are
        _engram_logs_as_json()
    return metrics.log_metrics(handler, capture_cold_start_metric=True) if metrics_on() else handler


def record_ms(phase: str, ms: float) -> None:
    """One timing of a phase, as the metric `<phase>Ms`."""
    if metrics_on():
        metrics.add_metric(name=f"{phase}Ms", unit=MetricUnit.Milliseconds, value=round(ms, 2))


def record_value(name: str, value: float) -> None:
    """A level (a lag in seconds, a backlog) as the metric `name`: its Maximum over a period is what an
    alarm or a dashboard watches."""
    if metrics_on():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=round(value, 2))


def count(name: str, value: int = 1) -> None:
    """Count an event as the metric `name` (429s from Discord, invalid requests)."""
    if metrics_on():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """Time a block as the metric `<phase>Ms` (recorded even when the block fails)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        record_ms(phase, (time.perf_counter() - start) * 1000)


def flush_metrics() -> None:
    """For the web-adapter function, which has no handler to wrap: publish after each request."""
    if metrics_on():
        metrics.flush_metrics(raise_on_empty_metrics=False)
