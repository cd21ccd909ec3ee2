"""Discord's rate limits as Discord defines them (topics/rate-limits.mdx):

- per-route buckets, named by the `X-RateLimit-Bucket` header, and counted separately for each value of the
  route's *major parameter* (`channel_id`, `guild_id`, or `webhook_id` + `webhook_token` — an interaction's
  token): one channel's used-up bucket holds back no other channel;
- a global limit of 50 requests a second per bot, counted across every process that holds the bot's token:
  up to eight worker functions run at once, so the count lives in DynamoDB (one conditional update per
  request, in windows short enough that no second anywhere holds more than 50);
- a 429 names its scope (`X-RateLimit-Scope`: user, global or shared) and `global: true` stops every route.

A request that would break a limit waits when the wait is short (`max_sleep_s`: a job listing a thousand
channels would otherwise be delayed and start over forever) and otherwise raises RateLimited up front, so the
job is delayed on the queue instead of sleeping in Lambda (or being refused)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

# the path segments that name a resource: the one after each is an id (a snowflake, a token)
_COLLECTIONS = {"channels", "guilds", "messages", "members", "roles", "users", "webhooks", "interactions"}
_MAJOR_TWO = {"webhooks", "interactions"}  # {id}/{token}: both are the major parameter


def _is_global(headers: Mapping[str, str]) -> bool:
    """Whether a 429's headers say the bot's global limit was hit (every route waits)."""
    return bool(headers.get("x-ratelimit-global")) or headers.get("x-ratelimit-scope") == "global"


class RateLimited(Exception):
    """Discord said 429 (or would): try again after `retry_after` seconds."""

    def __init__(self, retry_after: float, is_global: bool = False):
        super().__init__(f"rate limited for {retry_after}s")
        self.retry_after = retry_after
        self.is_global = is_global

    @property
    def delay_s(self) -> int:
        """How long a job waits on the queue before it is tried again: past the retry_after."""
        return int(self.retry_after) + 1


def major(path: str) -> str:
    """The route's major parameter as a path prefix ("/channels/123", "/webhooks/900/<token>"), or "" for
    routes without one. By position, as Discord's routes put it, whatever the id looks like."""
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in ("channels", "guilds"):
        return "/".join(parts[:3])
    if len(parts) > 3 and parts[1] in _MAJOR_TWO:
        return "/".join(parts[:4])
    return ""


def route(method: str, path: str) -> str:
    """The route: every id a placeholder (what Discord's bucket hash is shared across)."""
    parts = path.split("/")
    out = []
    for i, part in enumerate(parts):
        named = i >= 1 and parts[i - 1] in _COLLECTIONS
        token = i >= 2 and parts[i - 2] in _MAJOR_TWO
        out.append(":id" if part and not part.startswith("@") and (named or token) else part)
    return f"{method} " + "/".join(out)


class LocalGlobal:
    """The global limit counted in this process only: for one process (make run's stack, a test)."""

    def __init__(self, per_second: int = 50, clock: Callable[[], float] = time.monotonic):
        self.per_second, self.clock = per_second, clock
        self._recent: list[float] = []
        self._lock = threading.Lock()

    def admit(self) -> float | None:
        """None when a request may go now (it is counted), else how long to wait."""
        now = self.clock()
        with self._lock:
            self._recent = [t for t in self._recent if now - t < 1.0]
            if len(self._recent) >= self.per_second:
                return max(1.0 - (now - self._recent[0]), 0.001)
            self._recent.append(now)
            return None


class SharedGlobal:
    """The global limit counted for every process at once, in fixed windows of `window_s` holding at most
    `per_window` requests each, counted by `take(window index) -> bool` (a conditional increment in
    DynamoDB). Any one-second span meets at most 1/window_s + 1 windows: 0.2 s windows of 8 let no second
    hold more than 48 requests (40 a second sustained), under Discord's 50. If the count cannot be reached,
    this process falls back to counting alone at its share (`fallback`), never to no limit."""

    def __init__(
        self,
        take: Callable[[int], bool],
        window_s: float = 0.2,
        per_window: int = 8,
        clock: Callable[[], float] = time.time,
        fallback: LocalGlobal | None = None,
    ):
        self.take, self.window_s, self.per_window, self.clock = take, window_s, per_window, clock
        self.fallback = fallback or LocalGlobal(per_second=6)

    def admit(self) -> float | None:
        now = self.clock()
        window = int(now / self.window_s)
        try:
            if self.take(window):
                return None
        except Exception as exc:  # DynamoDB unreachable: stay well under the limit alone
            log.warning("the shared Discord rate count is unavailable (%s); counting locally", exc)
            return self.fallback.admit()
        return max((window + 1) * self.window_s - now, 0.001)


def shared_global(take_slot: Callable[[int, int, int], bool], window_s: float = 0.2) -> SharedGlobal:
    """The global limit shared through `take_slot(window, limit, expires_s)` (Limits.take_rate_slot):
    windows of `window_s` sized so that no one-second span holds more than RateLimits.GLOBAL_PER_SECOND."""
    per_window = max(1, int(RateLimits.GLOBAL_PER_SECOND / (1 / window_s + 1)))

    def take(window: int) -> bool:
        return take_slot(window, per_window, int((window + 1) * window_s) + 120)

    return SharedGlobal(take, window_s=window_s, per_window=per_window)


class RateLimits:
    """Discord's limits for one bot: buckets learned from the X-RateLimit headers (kept per process: a 429
    teaches the rest), the global limit from `global_limit` (shared across processes in the deployment),
    and 429s and other 4xx answers counted for the metrics (`on_count(name)`)."""

    GLOBAL_PER_SECOND = 50

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_sleep_s: float = 1.0,
        global_limit: LocalGlobal | SharedGlobal | None = None,
        on_count: Callable[[str], None] | None = None,
    ):
        self.clock = clock
        self.sleep = sleep
        self.max_sleep_s = max_sleep_s
        self.global_limit = global_limit or LocalGlobal(self.GLOBAL_PER_SECOND, clock=clock)
        self.on_count = on_count or (lambda name: None)
        self._lock = threading.Lock()
        self._route_bucket: dict[str, str] = {}
        self._exhausted_until: dict[tuple[str, str], float] = {}
        self._global_until = 0.0

    def before(self, method: str, path: str) -> None:
        """Wait out a short limit, raise RateLimited for a long one; otherwise count the request."""
        while True:
            wait = self._admit(method, path)
            if wait is None:
                return
            self.sleep(wait)

    def _wait_or_raise(self, wait: float, is_global: bool = False) -> float:
        if wait <= self.max_sleep_s:
            return max(wait, 0.001)
        raise RateLimited(wait, is_global=is_global)

    def _admit(self, method: str, path: str) -> float | None:
        """None when the request may go now (and it is counted); else how long to wait (or RateLimited)."""
        now = self.clock()
        with self._lock:
            if self._global_until > now:
                return self._wait_or_raise(self._global_until - now, is_global=True)
            bucket = self._route_bucket.get(route(method, path))
            until = self._exhausted_until.get((bucket or "", major(path)), 0) if bucket else 0
            if until > now:
                return self._wait_or_raise(until - now)
        wait = self.global_limit.admit()
        return None if wait is None else self._wait_or_raise(wait, is_global=True)

    def after(
        self,
        method: str,
        path: str,
        status: int,
        headers: Mapping[str, str],
        retry_after: float | None = None,
    ) -> None:
        """Learn from an answer: the route's bucket and whether it is used up (X-RateLimit-*), a 429's scope
        and a global stop; 429s and other 4xx counted."""
        bucket = headers.get("x-ratelimit-bucket")
        now = self.clock()
        with self._lock:
            if bucket:
                self._learn_bucket(method, path, status, headers, bucket, now, retry_after)
            if status == 429 and _is_global(headers):
                self._global_until = now + float(retry_after or headers.get("retry-after") or 1)
        self._count(status, headers)

    def _learn_bucket(
        self,
        method: str,
        path: str,
        status: int,
        headers: Mapping[str, str],
        bucket: str,
        now: float,
        retry_after: float | None,
    ) -> None:
        """The route's bucket, and until when it is used up (its major parameter's share of it)."""
        self._route_bucket[route(method, path)] = bucket
        if headers.get("x-ratelimit-remaining") == "0" or status == 429:
            reset = headers.get("x-ratelimit-reset-after") or retry_after or 1
            self._exhausted_until[(bucket, major(path))] = now + float(reset)

    def _count(self, status: int, headers: Mapping[str, str]) -> None:
        if status == 429:
            scope = headers.get("x-ratelimit-scope") or "user"
            self.on_count(f"discord429{scope.title()}")
        if status in (401, 403) or (status == 429 and headers.get("x-ratelimit-scope") != "shared"):
            # what Discord counts toward the 10,000 invalid requests per 10 minutes that earn an IP ban
            # (topics/rate-limits.mdx, Invalid Request Limit: 401, 403 and 429 but the shared ones); a 404
            # is not one of them (an opt-in's Unknown Member answers, one per server, would page the on-call)
            self.on_count("discordInvalidRequests")

    def global_stop(self, retry_after: float) -> None:
        """A 429 with `global: true` in its body: every route waits."""
        with self._lock:
            self._global_until = max(self._global_until, self.clock() + retry_after)
