"""Every DynamoDB key engram writes, built here and nowhere else: what `forget_user` must reach is
exactly what this module can name. Records (MemoriesTable) are keyed (bot, id), the bot spread over
RECORD_SHARDS partition keys (`record_pk`); everything else sits in StateTable as (pk, sk)."""

from __future__ import annotations

import hashlib

from ..text import fold_digest

# ----- MemoriesTable keys: a bot's records spread over RECORD_SHARDS partition keys ----------------
# A bot's writes would otherwise all land on one partition key of the table (and one of byKind, one of
# pending): ~1,000 write units a second, a few hundred messages. A record made by ids.py goes to one of
# RECORD_SHARDS keys, chosen from its id, so a key is known from (bot, id) alone. A record made by the
# old counter (an id below SPREAD_FROM_ID) keeps the plain key it was written with: readers read that key
# as one more shard, and an existing table needs no copy. Fixed forever: changing either would move
# records away from their keys.

RECORD_SHARDS = 8
SPREAD_FROM_ID = 10**12  # every counter-made id is below; every id ids.py makes after 2025-01-04 is above
SHARD_MARK = "~"  # never in a bot's name (NAME_PATTERN)


def record_shard(memory_id: int) -> int | None:
    """Which of a bot's keys a record lives under (None: the plain key of a counter-made id). Fibonacci
    hashing: consecutive ids, and one process's ids, spread evenly."""
    if memory_id < SPREAD_FROM_ID:
        return None
    return ((memory_id * 0x9E3779B97F4A7C15) & 0xFFFF_FFFF_FFFF_FFFF) >> (64 - 3)


def _spread(base: str, memory_id: int) -> str:
    shard = record_shard(memory_id)
    return base if shard is None else f"{base}{SHARD_MARK}{shard}"


# The keys a reader reads for one of a bot's kinds: the plain key (counter-made ids) and each shard. A
# long pass (rebuild, reconcile, re-embed) runs one part per key read, in parallel.
READ_SHARDS = RECORD_SHARDS + 1


def _every_shard(base: str) -> list[str]:
    return [base, *(f"{base}{SHARD_MARK}{s}" for s in range(RECORD_SHARDS))]


# State items read by key only that every stored message writes (claims, thread tails, channels' catch-up
# state) sit under one of SPREAD_SHARDS keys per bot, chosen from a digest of their sort key. Fixed
# forever: changing either would lose every item written (store/spread.py).
SPREAD_SHARDS = 16


def spread_by(plain: str, sk: str) -> str:
    """One of SPREAD_SHARDS partition keys beside a plain one, by a digest of the item's sort key."""
    shard = int.from_bytes(hashlib.blake2b(sk.encode(), digest_size=4).digest(), "big") % SPREAD_SHARDS
    return f"{plain}{SHARD_MARK}{shard}"


def record_pk(bot: str, memory_id: int) -> str:
    """The table's partition key of a record."""
    return _spread(bot, memory_id)


def bot_of(spread_key: str) -> str:
    """The bot a record's partition key (or pending key) names."""
    return spread_key.split(SHARD_MARK, 1)[0]


def bot_user(bot: str, user: str | None) -> str | None:
    """The byUser index key: every record a user is attributed to, per bot."""
    return f"{bot}#{user}" if user else None


def bot_kind(bot: str, kind: str, memory_id: int) -> str:
    """The byKind index key of a record: records of one kind per bot, spread as the table is."""
    return _spread(f"{bot}#{kind}", memory_id)


def bot_kinds(bot: str, kind: str, shard: int | None = None) -> list[str]:
    """Every byKind key of a bot's kind (a listing merges them by id); with `shard` (0 to READ_SHARDS - 1),
    the one a part of a long pass reads."""
    every = _every_shard(f"{bot}#{kind}")
    return every if shard is None else [every[shard]]


def pending_key(bot: str, memory_id: int) -> str:
    """The pending index key of a record still waiting for its vectors, spread as the table is."""
    return _spread(bot, memory_id)


def pending_keys(bot: str) -> list[str]:
    return _every_shard(bot)


# ----- unique claims: which memory holds a fact's folded text or a message's source id ------------


# Every stored message and fact claims one. Under one partition key per bot (`unique_pk`, what claims
# were made under before) a bot's writes met that key's ~1,000 write units a second; a claim now sits under
# one of SPREAD_SHARDS keys (spread_by), so who looks for a claim knows where it is. Claims made before stay
# under the plain key until the spread pass moves them (store/spread.py); until then, readers look there
# too.


def unique_pk(bot: str) -> str:
    """The plain key the claims made before they were spread sit under, until they are moved."""
    return f"unique#{bot}"


def claim_pk(bot: str, key: str) -> str:
    """The partition key of a claim on `key`: one of the bot's SPREAD_SHARDS claim keys."""
    return spread_by(unique_pk(bot), key)


def is_claim_pk(bot: str, pk: str) -> bool:
    """Whether a state item's partition key is one of the bot's claim keys (the plain one included)."""
    return pk == unique_pk(bot) or pk.startswith(f"{unique_pk(bot)}{SHARD_MARK}")


def spread_queued(bot: str) -> tuple[str, str]:
    """When the spread pass of a bot with items under a plain key was last queued (the sweep queues it
    again after an hour if it has not finished)."""
    return "spread", f"queued#{bot}"


def fact_key(server: str | None, project: str | None, user: str | None, text: str) -> str:
    """A fact's unique key: its folded text's digest in its scope."""
    return f"fact#{server or ''}#{project or ''}#{user or ''}#{fold_digest(text)}"


def source_key(source_id: str) -> str:
    """A chat message's unique key: its source message id."""
    return f"src#{source_id}"


# ----- counters, bots, settings ------------------------------------------------------------------

# the old id counter (ids are made in each process now; see store/ids.py) and what a process's id worker
# number is taken from, once per process
ID_WORKERS = ("counter", "idworker")
EMBEDDING_SETTINGS = ("settings", "embedding")


def bot_registered(bot: str) -> tuple[str, str]:
    return "bots", bot


# ----- the byScope index: which bots' records all carry their scope key -----------------------------


def scopes_ready(bot: str, kind: str) -> tuple[str, str]:
    """Set once every record of a bot's kind carries its byScope key (a new bot's at once; an older bot's
    when the stamp pass over its records ends): until then a scoped listing filters the kind's index."""
    return "scopes", f"ready#{bot}#{kind}"


def mixed_scopes(bot: str) -> tuple[str, str]:
    """Set once a record of the bot names both a server and a project (listed under its server, so a
    project's listing cannot use byScope alone)."""
    return "scopes", f"mixed#{bot}"


def stamp_queued(bot: str) -> tuple[str, str]:
    """When the stamp pass over an older bot's records was last queued (the sweep queues it again after
    an hour if it has not finished)."""
    return "scopes", f"queued#{bot}"


# ----- thread tails: the newest text of a thread (or of a user's run of facts), the next one's context


def thread_pk(bot: str) -> str:
    """The plain key the thread tails written before they were spread sit under, until they are moved."""
    return f"thread#{bot}"


def thread_tail_pk(bot: str, thread: str) -> str:
    """The partition key of a thread's tail (one write a stored message): one of SPREAD_SHARDS keys."""
    return spread_by(thread_pk(bot), thread)


# ----- contexts: which records carry whose words ---------------------------------------------------


def carriers_pk(bot: str, author: str | None) -> str:
    """The records whose context quotes this author (sk: the carrier's id): what forget clears."""
    return f"ctx#{bot}#{author or ''}"


def carrier_sk(carrier_id: int) -> str:
    return f"{carrier_id:012d}"


def expiries_pk(bot: str) -> str:
    """The memories of a bot that expire (sk: expiry_sk), read by the sweep up to now."""
    return f"expiry#{bot}"


def expiry_sk(at: int, memory_id: int) -> str:
    """When a memory expires (ms) then its id, zero-padded: sorted by time (ids only: no one's words)."""
    return f"{at:015d}#{memory_id:016d}"


def expiry_entry(sk: str) -> tuple[int, int]:
    at, memory_id = sk.split("#")
    return int(at), int(memory_id)


# ----- forgetting ----------------------------------------------------------------------------------


TOMBSTONE_PREFIX = "forgotten#"


def tombstone(bot: str, user: str) -> tuple[str, str]:
    """(bot, user, when): a forget, checked by every write path at the moment it writes."""
    return f"{TOMBSTONE_PREFIX}{bot}", user


def tombstone_bot(pk: str) -> str | None:
    """The bot a tombstone's pk names (None: not a tombstone)."""
    return pk[len(TOMBSTONE_PREFIX) :] if pk.startswith(TOMBSTONE_PREFIX) else None


def forgetting_pk(bot: str) -> str:
    """The forgets of a bot still under way (sk: the user; value: the forget's time; tag-less). Every read
    path reads this one small partition and hides those users; the sweep finishes what a crash cut off."""
    return f"forgetting#{bot}"


def forgetting(bot: str, user: str) -> tuple[str, str]:
    return forgetting_pk(bot), user


# ----- Discord -------------------------------------------------------------------------------------


def discord_pk(bot: str) -> str:
    return f"discord#{bot}"


def consent(bot: str, user: str) -> tuple[str, str]:
    return discord_pk(bot), f"consent#{user}"


CONSENT_PREFIX = "consent#"


def backfill_run(bot: str, user: str) -> tuple[str, str]:
    return discord_pk(bot), f"backfill#{user}"


def export_limit(bot: str, user: str) -> tuple[str, str]:
    return discord_pk(bot), f"export#{user}"


def token(bot: str, user: str, run: str) -> tuple[str, str]:
    return discord_pk(bot), f"token#{user}#{run}"


def tokens_prefix(user: str) -> str:
    return f"token#{user}#"


def cursors_pk(bot: str, user: str) -> str:
    """A user's backfill cursors, one per channel."""
    return f"discord#{bot}#backfill#{user}"


def channels_pk(bot: str) -> str:
    """The plain key the channels' catch-up state written before it was spread sits under, until moved."""
    return f"discord#{bot}#channels"


def channel_seen(bot: str, channel: str) -> tuple[str, str]:
    """What catch-up knows of a channel (written with every page it stores): one of SPREAD_SHARDS keys."""
    return spread_by(channels_pk(bot), channel), channel


def recent_pk(bot: str, channel: str) -> str:
    """A channel's messages stored lately (sk: the Discord message id; the record id and the edit time
    Discord gave): the window a catch-up re-reads for edits and deletions. Ids and times, no words."""
    return f"discord#{bot}#recent#{channel}"


def roster_pk(bot: str) -> str:
    """The servers some opted-in user is in (sk: the guild id; ids only, no one's): what a catch-up tick
    visits, a bounded page at a time."""
    return f"discord#{bot}#guilds"


def servers_left_pk(bot: str) -> str:
    """Servers the bot left, each with when its memories are due to be deleted (sk: the guild id)."""
    return f"discord#{bot}#left"


def roster_mark(bot: str) -> tuple[str, str]:
    """Where the catch-up rotation stands in the roster, and how far the roster was built from consents
    given before it existed (guild and consent ids, no one's words)."""
    return f"discord#{bot}#guilds#mark", "rotation"


def content_intent(bot: str) -> tuple[str, str]:
    """What engram last learnt about the app's Message Content intent (no one's words)."""
    return discord_pk(bot), "intent#content"


def active_threads(bot: str, guild: str) -> tuple[str, str]:
    """The threads a server's last visit found active (thread ids): one that is gone by the next visit
    archived (or was deleted) in between, and is read once more."""
    return f"discord#{bot}#active-threads", guild


def unreadable_pk(bot: str) -> str:
    """Channels the bot may not read (403, or 200 [] without Read Message History), sk: the channel id."""
    return f"discord#{bot}#unreadable"


def last_change(bot: str) -> tuple[str, str]:
    """When a memory of the bot was last removed or changed: what a cached recall is checked against."""
    return f"changes#{bot}", "at"


def reembed_run(vector: str) -> tuple[str, str]:
    """A re-embedding's chains still running (bot and kind names: no one's words)."""
    return "reembed", vector


def follow_on(chain: str) -> tuple[str, str]:
    """The follow-on a chain of jobs last queued (engram.follow_on: bot, vector, kind, channel and server
    ids, a position; no one's words)."""
    return "follow-on", chain


def extraction(bot: str) -> tuple[str, str]:
    """How post-turn extraction has been going (times, a count, an error's words: no one's memories)."""
    return f"sweep#{bot}", "extraction"


def sweep_mark(bot: str) -> tuple[str, str]:
    """How far the pending sweep has queued a bot's records (ids only: no one's words)."""
    return f"sweep#{bot}", "pending"


def rate_window(bot: str, window: int) -> tuple[str, str]:
    """The Discord requests every process of a bot made in one short window (engram.discord.limits): a
    partition per window, so the count spreads instead of heating one key."""
    return f"discord#{bot}#rate#{window}", "n"


def seen_interaction(bot: str, interaction_id: str) -> tuple[str, str]:
    return f"discord#{bot}#seen", interaction_id


# ----- LibreChat -------------------------------------------------------------------------------------


def user_key(key_id: str) -> tuple[str, str]:
    """A user's key, found by the id its token starts with (engram.access_keys)."""
    return f"userkey#{key_id}", "key"


def user_keys_pk(bot: str, user: str) -> str:
    """A user's keys listed (sk: each key's id): what listing them and forget_user read."""
    return f"userkeys#{bot}#{user}"


def chat_settings_pk(bot: str, user: str) -> str:
    """A LibreChat user's memory settings: sk `default` or `chat#<conversation>`."""
    return f"lcmem#{bot}#{user}"


def chat_setting_sk(conversation: str | None) -> str:
    return f"chat#{conversation}" if conversation else "default"


def conversation_of(sk: str) -> str | None:
    """The conversation a chat setting's sk names (None: the user's default)."""
    return sk.split("#", 1)[1] if sk.startswith("chat#") else None
