"""LibreChat's deletions and edits reach engram: a pass over the bot's facts, oldest first, a page at a
time, each page checked against LibreChat's MongoDB in a handful of batched reads (engram.proxy.source):

- a fact of a user whose account LibreChat deleted: the user is forgotten, everything of theirs, as
  `/memory forget everything` does (facts stored through the Memory API or MCP are not LibreChat's and
  are never a reason);
- a fact of a chat LibreChat no longer has (deleted, or a temporary chat it expired): removed;
- a fact of a user message LibreChat no longer has (its branch deleted): removed;
- a fact of a user message that an edit replaced (a newer user message under the same parent: LibreChat
  keeps the old branch, but the chat now says what the edit says): removed, so "My home city is Berlin"
  edited to "Munich" leaves the fact of Munich alone.

A step reads pages until its time is spent and hands the rest to the next job (the cursor: the last fact
id it checked), so a pass is bounded per job and resumes where it stopped; a step that fails is retried
from its cursor by SQS. Facts stored without a source (before this, or through the Memory API) are left
as they are. When MongoDB cannot be read, nothing is removed: a source engram cannot read is not a
deletion."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..jobs import LibreChatReconcileJob
from ..record import Paging, Record
from ..service import MemoryService
from .source import NO_PARENT, FactSource, LibreChatSource, StoredMessage

log = logging.getLogger(__name__)

PAGE = 200  # facts read and checked together (five MongoDB queries a page at most)
STEP_S = 20.0  # a step stops taking pages after this long and queues the rest


@dataclass
class Tally:
    """What one step found and did."""

    checked: int = 0
    users_forgotten: int = 0
    removed: dict[str, int] = field(default_factory=dict)

    def note(self, why: str, ids: list[int]) -> None:
        if ids:
            self.removed[why] = self.removed.get(why, 0) + len(ids)


@dataclass(frozen=True)
class _Sourced:
    record: Record
    source: FactSource


class Reconciler:
    """Runs reconcile steps for one bot's facts against LibreChat's MongoDB."""

    def __init__(
        self,
        service: MemoryService,
        source: LibreChatSource,
        queue_next: Callable[[LibreChatReconcileJob], None],
    ):
        self.service = service
        self.source = source
        self.queue_next = queue_next

    def step(self, job: LibreChatReconcileJob, budget_s: float = STEP_S) -> Tally:
        """Pages of facts from the job's cursor until the budget is spent; the rest queued as a new job."""
        deadline = time.monotonic() + budget_s
        tally, cursor = Tally(), job.cursor
        while True:
            page = self.service.records.page(job.bot, "fact", Paging(cursor, PAGE, oldest_first=True))
            if not page:
                log.info("librechat reconcile pass done", extra={"bot": job.bot, **_logged(tally)})
                return tally
            self._check(job.bot, page, tally)
            cursor = page[-1].id
            if len(page) < PAGE:
                log.info("librechat reconcile pass done", extra={"bot": job.bot, **_logged(tally)})
                return tally
            if time.monotonic() > deadline:
                self.queue_next(job.model_copy(update={"cursor": cursor}))
                log.info("librechat reconcile continues", extra={"bot": job.bot, **_logged(tally)})
                return tally

    def _check(self, bot: str, page: list[Record], tally: Tally) -> None:
        tally.checked += len(page)
        # only facts LibreChat's chats gave: a fact the Memory API or MCP stored under some id is not
        # LibreChat's to take back
        sourced = [_Sourced(r, s) for r in page if r.user and (s := FactSource.parse(r.source_id))]
        users = {s.record.user or "" for s in sourced}
        gone = users - self.source.existing_users(users)
        for user in sorted(gone):  # LibreChat deleted the account: the user, everywhere
            self.service.forget_user(bot, user)
            tally.users_forgotten += 1
        sourced = [s for s in sourced if s.record.user not in gone]
        sourced = self._chats_kept(bot, sourced, tally)
        self._messages_kept(bot, sourced, tally)

    def _chats_kept(self, bot: str, sourced: list[_Sourced], tally: Tally) -> list[_Sourced]:
        chats = {(s.record.user or "", s.source.conversation) for s in sourced}
        kept = self.source.existing_chats(chats)
        gone = [s.record.id for s in sourced if (s.record.user or "", s.source.conversation) not in kept]
        self._remove(bot, gone, "chat deleted", tally)
        removed = set(gone)
        return [s for s in sourced if s.record.id not in removed]

    def _messages_kept(self, bot: str, sourced: list[_Sourced], tally: Tally) -> None:
        with_message = [s for s in sourced if s.source.message]
        stored = self.source.user_messages({s.source.message or "" for s in with_message})
        gone = [s.record.id for s in with_message if s.source.message not in stored]
        self._remove(bot, gone, "message deleted", tally)
        alive = [(s, stored[s.source.message or ""]) for s in with_message if s.source.message in stored]
        self._remove(bot, self._replaced(alive), "message edited", tally)

    def _replaced(self, alive: list[tuple[_Sourced, StoredMessage]]) -> list[int]:
        """The facts of messages an edit replaced: a newer user message answers the same parent."""
        parents = {(m.conversation, m.parent or NO_PARENT) for _, m in alive}
        newest = self.source.newest_answers_to(parents)
        return [
            s.record.id
            for s, m in alive
            if newest.get((m.conversation, m.parent or NO_PARENT)) not in (None, s.source.message)
        ]

    def _remove(self, bot: str, ids: list[int], why: str, tally: Tally) -> None:
        if ids:
            self.service.remove_ids(bot, ids)
            tally.note(why, ids)


def _logged(tally: Tally) -> dict[str, object]:
    return {"checked": tally.checked, "usersForgotten": tally.users_forgotten, "removed": tally.removed}
