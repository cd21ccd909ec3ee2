"""Forgetting a person: one call that reaches every store engram keeps anything of theirs in, ordered so
that a crash at any point leaves nothing findable, and a tombstone that keeps them forgotten."""

from __future__ import annotations

import logging

from .domain import check_name
from .store import now_ms
from .vectors import Scope

log = logging.getLogger(__name__)
READ = 100


def forget_user(service, bot: str, user: str) -> dict:
    """Forget a user of a bot everywhere: vectors, records, the contexts of other records that quote them,
    thread tails, unique claims, Discord consent, backfill state, tokens and export limits, LibreChat memory
    settings, and every cache that could still serve them. Every front door calls this.

    Order: the tombstone first, so that nothing queued, retried or replayed can store anything of theirs
    from here on (every write path reads it at the moment it writes); then consent (Discord stops reading
    them); vectors before records (nothing stays findable if the index fails half-way: the call fails and
    is retried); vectors once more at the end, for an index job that raced the first pass."""
    bot, user = check_name("bot", bot), check_name("userId", user)
    service.state.mark_forgotten(bot, user, now_ms())
    state = service.state.forget_user(bot, user)
    vectors = service.index.delete_scope(Scope(bot=bot, user=user))
    ids = list(service.records.iter_user(bot, user))
    records = []
    for start in range(0, len(ids), READ):
        records.extend(service.records.batch_get(bot, ids[start : start + READ]).values())
    service.records.delete(records)
    contexts = service.release_words(bot, records, author=user)
    claims = service.records.user_claims(bot, user)  # leftovers of a crash between a claim and its record
    service.records.drop_claims(bot, claims)
    vectors += service.index.delete_scope(Scope(bot=bot, user=user))
    for hook in list(service.forget_hooks):
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
