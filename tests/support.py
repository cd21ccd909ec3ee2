"""Test helpers: a deterministic embedder and switchable wrappers to take dependencies down."""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import threading
import time

from engram.errors import EmbedderUnavailable, IndexUnavailable
from engram.words import terms


class HashEmbedder:
    """Deterministic bag-of-stems vectors (unit tests only; integration tests use the real model).
    Synonym groups map to one dimension so 'meaning' tests can share no word with their target."""

    provider = "fake"
    SYNONYMS = {
        "tea": "drink",
        "coffe": "drink",
        "beverag": "drink",
        "drink": "drink",
        "pup": "dog",
        "puppi": "dog",
        "dog": "dog",
    }

    def __init__(self, dim: int = 64, model: str = "hash-64"):
        self.dim, self.model = dim, model
        self.down = False
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        if self.down:
            raise EmbedderUnavailable("the fake embedder is down")
        out = []
        for text in texts:
            v = [0.0] * self.dim
            for t in terms(text):
                t = self.SYNONYMS.get(t, t)
                v[int(hashlib.md5(t.encode()).hexdigest(), 16) % self.dim] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append(
                [x / norm if norm else 0.0 for x in v] if any(v) else [1.0 / math.sqrt(self.dim)] * self.dim
            )
        return out


class SwitchableIndex:
    """Wraps a real index; while `down`, every call fails as an unreachable Qdrant would."""

    def __init__(self, inner):
        self.inner = inner
        self.down = False

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.down and name != "close":
                raise IndexUnavailable("Qdrant failed: connection refused (test)")
            return attr(*args, **kwargs)

        return call


class SwitchableEmbedder:
    """Wraps a real embedder; while `down`, it fails as an unreachable Ollama would."""

    def __init__(self, inner):
        self.inner = inner
        self.provider, self.model = inner.provider, inner.model
        self.down = False

    def embed(self, texts):
        if self.down:
            raise EmbedderUnavailable("the embedder did not answer (test)")
        return self.inner.embed(texts)


def wait_until(predicate, timeout_s: float = 60.0, every_s: float = 0.2) -> bool:
    """Poll until predicate() is true or the time is up (background work on the local stack)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


class LocalServer:
    """Serves an ASGI app with uvicorn on a free 127.0.0.1 port in a background thread."""

    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


class Gate:
    """Makes a fake hang like a stuck dependency: while held, requests wait (after `passes` more go
    through); `.held` counts the requests it caught."""

    def __init__(self):
        self._open = threading.Event()
        self._open.set()
        self.passes = 0
        self.held = 0

    def hold(self, after: int = 0) -> None:
        self.passes, self.held = after, 0
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def wrap(self, app):
        import asyncio

        async def gated(scope, receive, send):
            if scope["type"] == "http" and not self._open.is_set():
                if self.passes > 0:
                    self.passes -= 1
                else:
                    self.held += 1
                    while not self._open.is_set():
                        await asyncio.sleep(0.05)
            await app(scope, receive, send)

        return gated


class ServedApp:
    """A fake service whose FastAPI `app` is served on a free 127.0.0.1 port by start(); its `gate`
    can make it hang."""

    app = None

    def start(self):
        """Serve on a free 127.0.0.1 port; `.port` and `.url` tell where."""
        self.gate = Gate()
        self._served = LocalServer(self.gate.wrap(self.app))
        self.port, self.url = self._served.port, self._served.url
        return self

    def stop(self) -> None:
        self._served.stop()


def key_names(key: str, user: str) -> bool:
    """Whether a state key names the user as one of its parts (`discord#900#backfill#1001`, `token#1001#`):
    a substring test also matches a random interaction id that happens to hold the user's digits."""
    return user in re.split(r"[#:]", key)


class HeldJobs:
    """A jobs queue in memory for unit tests: what the rules send is held, as its SQS message body, until
    `run` hands each to the worker's handler for its type (parsed from that body, as the worker parses
    it); a job that fails stays held, as SQS keeps a message a handler raised on."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.delays: list[int] = []

    def send(self, job, delay_s: int = 0) -> None:
        self.bodies.append(job.model_dump_json())
        self.delays.append(delay_s)

    def send_many(self, jobs) -> None:
        for job in jobs:
            self.send(job)

    def kinds(self) -> list[str]:
        from engram.jobs import parse_job

        return [parse_job(body).kind for body in self.bodies]

    def run(self, engine, limit: int = 1000) -> int:
        """Run held jobs (and the jobs they queue) until none is left; returns how many ran."""
        from engram.errors import Forgotten
        from engram.jobs import parse_job
        from engram.worker import HANDLERS

        worker = process_worker(engine)
        ran = 0
        while self.bodies and ran < limit:
            body = self.bodies.pop(0)
            self.delays.pop(0)
            job = parse_job(body)
            with contextlib.suppress(Forgotten):  # the worker drops a forgotten user's job
                HANDLERS[type(job)](worker, job)
            ran += 1
        return ran


def process_worker(engine):
    """A worker on `engine`, with the process's proxy and Discord parts (built only if a job needs them), as
    functions/worker/app.py wires it."""
    from engram.worker import Worker

    def proxy():
        from engram.proxy.runtime import get_proxy

        return get_proxy()

    def discord():
        from engram.discord.runtime import get_discord

        return get_discord()

    return Worker(lambda: engine, proxy=proxy, discord=discord)
