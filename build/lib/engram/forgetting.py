"""Forgetting a person: one call that reaches every store engram keeps anything of theirs in, ordered so
that a crash at any point leaves nothing findable, and a tombstone that keeps them forgotten."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .domain import required_name
from .store import Record, now_ms
from .vectors import Scope
from .writes import MemoryWrites

log = logging.getLogger(__name__)
READ = 100
# Called with (bot, user) after a forget: caches that could still serve the user drop them
ForgetHook = Callable[[str, str], None]


def forget_user(writes: MemoryWrites, hooks: list[ForgetHook], bot: str, user: str) -> dict[str, Any]:
    """Forget a user of a bot everywhere: vectors, records, the contexts of other records that quote them,
    thread tails, unique claims, Discord consent, backfill state, tokens and export limits, LibreChat memory
    settings, and every cache that could still serve them. Every front door calls this.

    Order: the tombstone first, so that nothing queued, retried or replayed can store anything of theirs
    from here on (every write path reads it at the moment it writes); then consent (Discord stops reading
    them); vectors before records (nothing stays findable if the index fails half-way: the call fails and
    is retried); vectors once more at the end, for an index job that raced the first pass."""
    bot, user = required_name("bot", bot), required_name("userId", user)
    writes.state.mark_forgotten(bot, user, now_ms())
    state = writes.state.forget_user(bot, user)
    vectors = writes.index.delete_scope(Scope(bot=bot, user=user))
    ids = list(writes.records.iter_user(bot, user))
    records: list[Record] = []
    for start in range(0, len(ids), READ):
        records.extend(writes.records.batch_get(bot, ids[start : start + READ]).values())
    writes.records.delete(records)
    contexts = writes.release_words(bot, records, author=user)
    claims = writes.records.user_claims(bot, user)  # leftovers of a crash between a claim and its record
    writes.records.drop_claims(bot, claims)
    vectors += writes.index.delete_scope(Scope(bot=bot, user=user))
    for hook in list(hooks):
        try:
            hook(bot, user)
        except Exception:  # a cache that cannot be cleared must not undo a forget; tombstones cover it
            log.exception("a forget hook failed")
    facts = sum(1 for r in records if r.kind == "fact")
    return {
        "facts": facts,
        "messages": len(records) - facts,
        "vectors": vectors,
        "contexts": contexts,
        "claims": len(claims),
        "state": state,
    }
