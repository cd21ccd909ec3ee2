"""One store owns DynamoDB: outside `engram.store` nothing imports pynamodb, touches the table models or
builds a key — so `forget_user` can reach every item kind the code can write (httpx pins its public
surface with a test that walks the exports; this one walks the imports)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "engram" / "engram"
FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
# Every prefix `engram.store.keys` builds: a string starting with one of them outside the store is a key
KEY_PREFIXES = (
    "unique#",
    "thread#",
    "discord#",
    "lcmem#",
    "consent#",
    "backfill#",
    "token#",
    "export#",
    "forgotten#",
    "ctx#",
    "src#",
    "fact#",
    "chat#",
)


# The record names the line and the scope it is listed under (a fact's line is its author's facts in one
# scope): index keys of the record's own row, deleted with it, read by the memory rules' windows
RECORD = PACKAGE / "record.py"


def modules():
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(FUNCTIONS.rglob("*.py")):
        if PACKAGE / "store" not in path.parents and path != RECORD:
            yield path, ast.parse(path.read_text(), filename=str(path))


def literal_starts(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def test_nothing_outside_the_store_imports_pynamodb_or_the_table_models():
    offences = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                offences += [
                    f"{path.name}: import {a.name}" for a in node.names if a.name.split(".")[0] == "pynamodb"
                ]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if (
                    module.split(".")[0] == "pynamodb"
                    or module.endswith("store.models")
                    or module.endswith("records")
                ):
                    offences.append(f"{path.name}: from {module} import ...")
                if any(a.name in ("StateItem", "MemoryRecord") for a in node.names) and module.endswith(
                    "models"
                ):
                    offences.append(f"{path.name}: the table models")
            elif isinstance(node, ast.Name) and node.id == "StateItem":
                offences.append(f"{path.name}:{node.lineno}: StateItem")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "MemoryRecord"
            ):
                offences.append(f"{path.name}:{node.lineno}: builds a MemoryRecord (use store.new_record)")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in ("by_user", "by_kind", "pending")
                and isinstance(node.value, ast.Name)
                and node.value.id == "MemoryRecord"
            ):
                offences.append(f"{path.name}:{node.lineno}: queries a table index")
    assert offences == []


def engram_modules():
    """Every module of the package outside the store, imported (so a re-export by any path is seen)."""
    import importlib
    import pkgutil

    import engram

    for info in pkgutil.walk_packages(engram.__path__, "engram."):
        if not info.name.startswith("engram.store"):
            yield importlib.import_module(info.name)


def test_no_module_outside_the_store_holds_a_table_model_by_any_path():
    """Whatever the import path (a re-export, an alias, a star import), the class itself is what a module
    would hold: none outside the store holds a pynamodb model, or pynamodb itself."""
    import inspect

    from pynamodb.models import Model

    offences = []
    for module in engram_modules():
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, Model):
                offences.append(f"{module.__name__}.{name}: the table model {value.__name__}")
            elif inspect.ismodule(value) and value.__name__.split(".")[0] == "pynamodb":
                offences.append(f"{module.__name__}.{name}: pynamodb")
    assert offences == []


def store_classes():
    """Every store class the rest of engram is handed, DynamoDB's and the in-memory ones: the record store,
    its parts and line reads, and each state store by concern."""
    import inspect

    import engram.store.in_memory._core as memory_core
    import engram.store.in_memory._discord as memory_discord
    import engram.store.in_memory._records as memory_records
    import engram.store.in_memory._ties as memory_ties
    import engram.store.state as state
    from engram.store import LineReads, RecordStore
    from engram.store.claims import Claims
    from engram.store.in_memory import InMemoryState
    from engram.store.pending import PendingMarks
    from engram.store.scoping import ScopeMarks
    from engram.store.threads import Carriers, ThreadTails

    concern = [getattr(state, name) for name in state.__all__ if inspect.isclass(getattr(state, name))]
    in_memory = [
        c
        for module in (memory_core, memory_discord, memory_records, memory_ties)
        for name, c in vars(module).items()
        if inspect.isclass(c) and c.__module__ == module.__name__ and not name.startswith("_Pass")
    ]
    dynamodb = [RecordStore, LineReads, Claims, ThreadTails, Carriers, ScopeMarks, PendingMarks]
    return [*dynamodb, InMemoryState, *in_memory, *[c for c in concern if not _is_protocol(c)]]


def _is_protocol(cls) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def public_hints():
    """(store, method, argument or 'return', type) of every public method of every store."""
    import inspect
    import typing

    for store in store_classes():
        for name, method in inspect.getmembers(store, inspect.isfunction):
            if name.startswith("_") and name != "__init__":
                continue
            for arg, hint in typing.get_type_hints(method).items():
                yield store.__name__, name, arg, hint


def test_the_store_hands_out_and_takes_back_domain_objects_only():
    """No public method of the stores takes or returns a pynamodb model: outside the store, a memory is a
    Record (a plain dataclass whose attribute writes change nothing in DynamoDB), never a row."""
    import inspect
    import typing

    from pynamodb.models import Model

    from engram.store import Record

    def mentions_model(hint) -> bool:
        if inspect.isclass(hint) and issubclass(hint, Model):
            return True
        return any(mentions_model(arg) for arg in typing.get_args(hint))

    offences = [f"{s}.{m}: {a}" for s, m, a, hint in public_hints() if mentions_model(hint)]
    assert offences == []
    assert not issubclass(Record, Model) and Record.__slots__  # a plain object: no attribute is a column


def test_the_stores_hand_out_typed_values_never_any_object_or_an_untyped_dict():
    """What crosses the store boundary says what it holds: no `Any`, no `object`, no dict without its
    types (a dict whose keys live only in a docstring was how callers came to index camelCase keys)."""
    import typing
    from typing import Any

    def untyped(hint) -> bool:
        if hint is Any or hint is object or hint is dict:
            return True
        if typing.get_origin(hint) is dict and not typing.get_args(hint):
            return True
        return any(untyped(arg) for arg in typing.get_args(hint))

    classes = {c.__name__ for c in store_classes()}
    assert {"StateStore", "Consents", "BackfillRuns", "Cursors", "Channels", "Tombstones"} <= classes
    assert {"InMemoryRecords", "MemoryClaims", "InMemoryState", "Claims", "Carriers"} <= classes
    offences = [f"{s}.{m}({a}): {hint}" for s, m, a, hint in public_hints() if untyped(hint)]
    assert offences == []


def test_nothing_outside_the_store_builds_a_key():
    offences = []
    for path, tree in modules():
        for node in ast.walk(tree):
            text = literal_starts(node)
            if text and text.startswith(KEY_PREFIXES):
                offences.append(f"{path.name}:{node.lineno}: {text!r}")
    assert offences == []


def test_every_state_key_kind_is_reached_by_forget_user_or_holds_nothing_of_a_person():
    """Each key builder of `engram.store.keys` is either deleted per user by forget (records, claims,
    tails, consent, backfill, tokens, cursors, export limits, chat settings, carriers) or holds no one's
    words (counters, settings, bots, channel ids, seen interaction ids, request counts, the tombstone
    itself)."""
    from engram.store import keys

    builders = {
        name for name, value in vars(keys).items() if callable(value) and not name.startswith("_")
    } - {"fold_digest"}
    reached = {
        "bot_user",
        "bot_kind",
        "bot_kinds",  # every byKind key of a bot's kind (its shards)
        "record_pk",  # a record's partition key: it goes with the record
        "pending_key",  # a record's pending key: it goes with the record
        "pending_keys",
        "unique_pk",
        "claim_pk",
        "is_claim_pk",
        "fact_key",
        "source_key",
        "thread_pk",
        "thread_tail_pk",
        "spread_by",
        "carriers_pk",
        "carrier_sk",
        "consent",
        "backfill_run",
        "export_limit",
        "token",
        "tokens_prefix",
        "cursors_pk",
        "chat_settings_pk",
        "chat_setting_sk",
        "user_keys_pk",  # a user's keys listed: forget_user reads it and deletes each key by id
        "user_key",
        "conversation_of",
        "discord_pk",
        "forgetting",  # a forget under way: its item is deleted when the forget completes
        "forgetting_pk",
    }
    nobody = {
        "bot_registered",
        "channels_pk",
        "channel_seen",
        "seen_interaction",
        "tombstone",
        "tombstone_bot",
        "content_intent",
        "unreadable_pk",
        "recent_pk",
        "rate_window",  # a count of Discord requests in a fifth of a second
        "last_change",  # when a memory of the bot last changed
        "sweep_mark",  # how far the pending sweep has queued (an id and a time)
        "extraction",  # how extraction has been going (times, a count, an error's words: no memory)
        "roster_pk",  # the servers someone opted in is in (guild ids)
        "roster_mark",  # where the catch-up rotation stands (a guild id, a consent's key)
        "servers_left_pk",  # servers the bot left and when their deletion is due (guild ids, a time)
        "active_threads",  # a server's threads active at its last visit (thread and channel ids)
        "reembed_run",  # a re-embedding's chains left (bot ids and kinds)
        "follow_on",  # the follow-on a chain of jobs last queued (bot, vector, kind, channel ids; a position)
        "scopes_ready",  # a bot's kind all carries its byScope key (a time)
        "mixed_scopes",  # some record of a bot names a server and a project (a time)
        "stamp_queued",  # when a bot's stamp pass was queued (a time)
        "spread_queued",  # when a bot's spread pass was queued (a time)
        "record_shard",  # which shard an id goes to (a number)
        "bot_of",  # reads the bot from a spread key
        "expiries_pk",  # the memories that expire (their ids and times): the sweep deletes them, then these
        "expiry_sk",
        "expiry_entry",  # reads a time and an id from an expiry's key
    }
    # a record's line (byLine) and scope (byScope) are named by the record itself (engram.record), and go
    # with it; a fact line's tail is a thread tail, reached as every tail is
    assert builders == reached | nobody, builders ^ (reached | nobody)
