"""Forgetting a person: one call that reaches every store engram keeps anything of theirs in. It finishes
itself: a forget is recorded as under way before anything is deleted, every read path hides the user
from that moment, each step can be run again, and what one call has no time for is finished by jobs (or,
after a crash, by the sweep and the next start)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .domain import required_name
from .errors import NotFound
from .jobs import ForgetJob
from .store import Record, drew_on, fact_tail, now_ms, reply_author
from .vectors import Scope
from .writes import MemoryWrites

log = logging.getLogger(__name__)
READ = 100
# How long a front door works on a forget before it answers "forgetting — N left" and lets jobs finish
# (API Gateway cuts the HTTP function at 30 s); and how long one forget job works before it queues the next.
DOOR_BUDGET_S = 8.0
JOB_BUDGET_S = 60.0
# A forget under way that has not moved for this long was cut off (a crash, a timeout): the sweep resumes it
STALLED_MS = 120_000
# Called with (bot, user) after a forget: caches that could still serve the user drop them
ForgetHook = Callable[[str, str], None]


@dataclass(slots=True)
class Tally:
    """What one run of a forget did."""

    facts: int = 0
    messages: int = 0
    vectors: int = 0
    contexts: int = 0
    answers: int = 0  # /ask answers of others made from their words, removed
    claims: int = 0
    state: dict[str, int] = field(default_factory=dict)

    def outcome(self, left: int) -> dict[str, Any]:
        return {
            "facts": self.facts,
            "messages": self.messages,
            "vectors": self.vectors,
            "contexts": self.contexts,
            "answers": self.answers,
            "claims": self.claims,
            "state": self.state,
            "done": left == 0,
            "left": left,
        }


class Forgetting:
    """Forgets users: resumable and idempotent from any step, bounded in time per call."""

    def __init__(self, writes: MemoryWrites, hooks: list[ForgetHook]) -> None:
        self.writes = writes
        self.records = writes.records
        self.state = writes.state
        self.hooks = hooks

    def forget(
        self, bot: str, user: str, *, at: int | None = None, budget_s: float = DOOR_BUDGET_S
    ) -> dict[str, Any]:
        """Forget a user of a bot everywhere: vectors, records, the contexts of other records that quote them,
        thread tails, unique claims, Discord consent, backfill state, tokens and export limits, LibreChat
        memory settings, and every cache that could still serve them. Every front door calls this.

        `at`: when the forget was asked for (a resumed forget keeps its own). Order: the forget is marked
        under way (every read hides the user from here), then the tombstone (nothing queued, retried or
        replayed can store anything of theirs from here on), consent, vectors, the contexts that quote them,
        their records, claims, vectors once more (for an index job that raced the first pass), caches; the
        mark goes last. Past `budget_s` it stops between steps, queues a job for the rest and says how many
        records are `left`."""
        bot, user = required_name("bot", bot), required_name("userId", user)
        deadline = time.monotonic() + budget_s
        at = self._begin(bot, user, at if at is not None else now_ms())
        tally = Tally(state=self.state.forget_user(bot, user))
        tally.vectors = self.writes.index.delete_scope(Scope(bot=bot, user=user))
        done = self._release_contexts(bot, user, at, deadline, tally)
        # contexts still to clear keep the forget going even when no record of theirs is left
        left = (
            self._delete_records(bot, user, at, deadline, tally)
            if done
            else max(1, len(self.records.iter_user(bot, user)))
        )
        if left:
            self.state.tombstones.begin(bot, user, at, now_ms())
            self.writes.queue.send(ForgetJob(bot=bot, user=user, at=at))
            log.info("forget of a user continues in a job", extra={"bot": bot, "left": left})
            return tally.outcome(left)
        claims = self.records.claims.stale(bot, user)  # leftovers of a crash between a claim and its record
        self.records.claims.drop(bot, claims)
        tally.claims = len(claims)
        tally.vectors += self.writes.index.delete_scope(Scope(bot=bot, user=user))
        for hook in list(self.hooks):
            try:
                hook(bot, user)
            except Exception:  # a cache that cannot be cleared must not undo a forget; tombstones cover it
                log.exception("a forget hook failed")
        self.state.tombstones.end(bot, user, at)
        return tally.outcome(0)

    def _begin(self, bot: str, user: str, at: int) -> int:
        """Mark the forget under way, then leave its tombstone; a later forget already under way or
        recorded wins (its time covers this one's)."""
        self.records.register_bot(bot)  # the sweep finds forgets under way by bot
        under_way = self.state.tombstones.under_way(bot).get(user)
        at = max(at, under_way[0]) if under_way else at
        self.state.tombstones.begin(bot, user, at, now_ms())
        if self.state.tombstones.when(bot, {user}).get(user, -1) < at:
            self.state.tombstones.mark(bot, user, at)
        return at

    def _release_contexts(self, bot: str, user: str, at: int, deadline: float, tally: Tally) -> bool:
        """Clear the contexts that quote the user (their points made again), a chunk at a time; False when
        time ran out first."""
        carrier_ids = self.records.carriers.of(bot, user)
        for start in range(0, len(carrier_ids), READ):
            if time.monotonic() > deadline:
                return False
            chunk = carrier_ids[start : start + READ]
            self._release_chunk(bot, user, at, chunk, tally)
            self.records.carriers.drop(bot, user, chunk)
        return True

    def _release_chunk(self, bot: str, user: str, at: int, chunk: list[int], tally: Tally) -> None:
        """One chunk of carriers: /ask answers made from the user's words go; contexts quoting them and
        replies naming them are cleared."""
        # their own records quoting themselves are deleted next: no point in indexing them again
        others = [
            carrier
            for carrier in self.records.batch_get(bot, chunk).values()
            if not (carrier.user == user and carrier.arrived <= at)
        ]
        answers = {int(c.id) for c in others if user in drew_on(c)}
        for answer in answers:
            with contextlib.suppress(NotFound):  # gone already: a retry, or a delete meanwhile
                self.writes.remove(bot, answer)
        tally.answers += len(answers)
        others = [c for c in others if int(c.id) not in answers]
        quoting = [c for c in others if c.context and c.context_author == user]
        cleared = [carrier for carrier in quoting if self.records.clear_context(carrier)]
        cleared += [c for c in others if reply_author(c) == user and self._unreply(c)]
        if cleared:
            self.writes.indexer.index_or_defer(bot, cleared)
        tally.contexts += len(cleared)

    def _unreply(self, record: Record) -> bool:
        """A reply no longer names whom it answered (the message id and author of a forgotten user's
        message); its words stay."""
        content = {k: v for k, v in record.content.items() if k != "replyTo"}
        return self.records.change_message(record, record.text, content)

    def _delete_records(self, bot: str, user: str, at: int, deadline: float, tally: Tally) -> int:
        """Delete the user's records received up to the forget (a later one is a new remember's), with
        the thread tails that hold their words, a chunk at a time; returns how many are left (0: done)."""
        ids = self.records.iter_user(bot, user)
        for start in range(0, len(ids), READ):
            if time.monotonic() > deadline:
                return len(ids) - start
            chunk = self.records.batch_get(bot, ids[start : start + READ]).values()
            doomed = [r for r in chunk if r.arrived <= at]
            # the windows around them lose their words first: a forget resumed after a crash finds the
            # records still there and does it again
            self.writes.indexer.rewindow(doomed, removed=True)
            self.records.delete(doomed)
            self.records.tails.drop(bot, _threads(doomed), user=user)
            for channel, messages in _by_channel(doomed).items():  # the edit/delete window's ids of them
                self.state.channels.drop_recent(bot, channel, messages)
            facts = sum(1 for r in doomed if r.kind == "fact")
            tally.facts += facts
            tally.messages += len(doomed) - facts
        return 0

    def resume_stalled(self, stalled_ms: int = STALLED_MS) -> int:
        """Queue the rest of every forget that stopped moving (cut off by a crash or a timeout); returns how
        many. The sweep runs this, and the local stack at every start."""
        now, resumed = now_ms(), 0
        for bot in self.records.bots():
            for user, (at, touched) in self.state.tombstones.under_way(bot).items():
                if now - touched >= stalled_ms:
                    self.writes.queue.send(ForgetJob(bot=bot, user=user, at=at))
                    resumed += 1
        return resumed


def _by_channel(records: list[Record]) -> dict[str, list[str]]:
    """The Discord messages among these records, by channel: {channel id: [message ids]}."""
    out: dict[str, list[str]] = {}
    for r in records:
        channel = r.content.get("channelId") if isinstance(r.content, dict) else None
        if channel and r.source_id:
            out.setdefault(str(channel), []).append(r.source_id)
    return out


def _threads(records: list[Record]) -> list[str]:
    """The threads (and fact scopes) whose newest text may be one of these records'."""
    threads = {r.thread for r in records if r.thread}
    threads |= {fact_tail(r.server, r.project, r.user) for r in records if r.kind == "fact"}
    return sorted(threads)
