"""Langfuse traces for proxied turns when LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are set; a no-op
otherwise. Each turn that calls a model is a `chat-turn` trace (session = conversation id) with
`resolve-context` and `recall` spans and an `upstream` generation carrying the model and token usage."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..observability import timed

if TYPE_CHECKING:
    from ..config.proxy import ProxySettings

log = logging.getLogger(__name__)


class _Nothing:
    """Stands in for a span when telemetry is off."""

    def end(self, **_: Any) -> None:
        pass

    def update(self, **_: Any) -> None:
        pass


class TurnTrace:
    """The observations of one turn."""

    def __init__(self, root: Any = None) -> None:
        self.root = root

    @contextlib.contextmanager
    def span(self, name: str, **metadata: Any) -> Iterator[Any]:
        """Time a phase of the turn as a child span (and as a metric on Lambda)."""
        if self.root is None:
            with timed(name):
                yield _Nothing()
            return
        span = self.root.start_observation(name=name, as_type="span", metadata=metadata or None)
        try:
            with timed(name):
                yield span
        except Exception as exc:
            span.update(level="ERROR", status_message=str(exc)[:300])
            raise
        finally:
            span.end()

    def generation(self, model: str) -> Any:
        """The upstream call; end it with end_generation()."""
        if self.root is None:
            return _Nothing()
        return self.root.start_observation(name="upstream", as_type="generation", model=model or None)

    @staticmethod
    def usage(api: str, usage: dict[str, Any] | None) -> dict[str, int] | None:
        """Token usage in Langfuse's shape from either wire format."""
        if not usage:
            return None
        if api == "openai":
            return {
                "input": int(usage.get("prompt_tokens") or 0),
                "output": int(usage.get("completion_tokens") or 0),
            }
        return {"input": int(usage.get("input_tokens") or 0), "output": int(usage.get("output_tokens") or 0)}

    def end(self, **fields: Any) -> None:
        """Close the turn's root span."""
        if self.root is not None:
            self.root.update(**fields)
            self.root.end()


class Telemetry:
    """Creates turn traces, or nothing at all without Langfuse keys."""

    def __init__(
        self,
        public_key: str | None = None,
        secret_key: str | None = None,
        base_url: str | None = None,
        environment: str | None = None,
        span_exporter: Any = None,
    ) -> None:
        self.client = None
        if public_key and secret_key:
            try:
                from langfuse import Langfuse

                self.client = Langfuse(
                    public_key=public_key,
                    secret_key=secret_key,
                    base_url=base_url or "https://cloud.langfuse.com",
                    environment=environment or "production",
                    span_exporter=span_exporter,
                )
            except Exception:  # telemetry never takes the proxy down
                log.exception("Langfuse could not start; telemetry is off")

    @classmethod
    def from_settings(cls, settings: ProxySettings) -> Telemetry:
        """From LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY, LANGFUSE_BASE_URL, LANGFUSE_ENVIRONMENT."""
        return cls(
            settings.langfuse_public_key,
            settings.langfuse_secret_key,
            settings.langfuse_base_url,
            settings.langfuse_environment,
        )

    @property
    def enabled(self) -> bool:
        return self.client is not None

    def turn(self, *, conversation: str | None, user: str | None, upstream: str, model: str) -> TurnTrace:
        """Start a `chat-turn` trace."""
        if self.client is None:
            return TurnTrace()
        from langfuse import propagate_attributes

        with propagate_attributes(session_id=conversation, user_id=user, trace_name="chat-turn"):
            root = self.client.start_observation(
                name="chat-turn", as_type="span", metadata={"upstream": upstream, "model": model}
            )
        return TurnTrace(root)

    def flush(self) -> None:
        """Send what is buffered (Lambda freezes after the reply)."""
        if self.client is not None:
            self.client.flush()
