"""The scale bench's index write units (dynalite bills none): AWS's rules for entering, leaving, moving in
and changing inside a global secondary index."""

from __future__ import annotations

from tests.bench.index_units import _Index, item_size

KEYS_ONLY = {
    "KeySchema": [{"AttributeName": "line", "KeyType": "HASH"}, {"AttributeName": "at", "KeyType": "RANGE"}],
    "Projection": {"ProjectionType": "KEYS_ONLY"},
}
ALL = {**KEYS_ONLY, "Projection": {"ProjectionType": "ALL"}}


def item(line: str | None = "l1", text: str = "hi", at: int = 1) -> dict:
    out = {"bot": {"S": "b"}, "id": {"N": "7"}, "at": {"N": str(at)}, "text": {"S": text}}
    if line:
        out["line"] = {"S": line}
    return out


def test_entering_leaving_and_moving_cost_a_write_each_way():
    index = _Index(KEYS_ONLY, ["bot", "id"])
    assert index.units(None, item()) == 1  # enters
    assert index.units(item(), None) == 1  # leaves (deleted)
    assert index.units(item(), item(line=None)) == 1  # leaves (its key removed)
    assert index.units(item(line=None), item(line=None)) == 0  # never in it
    assert index.units(item("l1"), item("l2")) == 2  # moves: out of one key, into another


def test_a_change_costs_only_where_the_index_carries_it():
    assert _Index(KEYS_ONLY, ["bot", "id"]).units(item(text="a"), item(text="b")) == 0
    assert _Index(ALL, ["bot", "id"]).units(item(text="a"), item(text="b")) == 1
    big = "x" * 3000  # an ALL index rewrites the whole item: a KB a unit
    assert _Index(ALL, ["bot", "id"]).units(item(text="a"), item(text=big)) == 3


def test_item_size_counts_names_and_values():
    assert item_size({"ab": {"S": "xyz"}}) == 5
    assert item_size({"n": {"N": "12345"}}) == 1 + 3


def test_by_kind_keys_costs_a_stored_message_one_write_where_by_kind_cost_four():
    """Issue 46: byKind copied the whole item and was rewritten by every update of it, its vectors' mark
    included; byKindKeys holds keys and scope, which that mark does not change. A Discord message of
    ~1.4 KB as the table holds it, stored, then marked once its vector is in Qdrant."""
    from infra.aws_template import table_definitions

    table = table_definitions()["MemoriesTable"]
    keys = [k["AttributeName"] for k in table["KeySchema"]]
    indexes = {i["IndexName"]: _Index(i, keys) for i in table["GlobalSecondaryIndexes"]}
    words = "a message of about five hundred characters " * 12
    stored = {
        "bot": {"S": "b~3"},
        "id": {"N": "123456789012345678"},
        "kind": {"S": "message"},
        "text": {"S": words},
        "content": {"S": '{"message": "' + words + '", "channelId": "1110000000000000011"}'},
        "serverId": {"S": "1100000000000000001"},
        "userId": {"S": "1200000000000000001"},
        "botKind": {"S": "b#message~3"},
        "pendingBot": {"S": "b~3"},
        "createdAt": {"N": "1796000000000"},
        "updatedAt": {"N": "1796000000000"},
    }
    marked = {k: v for k, v in stored.items() if k != "pendingBot"} | {"vectorModel": {"S": "all-minilm"}}
    assert item_size(stored) > 1024
    old, new = indexes["byKind"], indexes["byKindKeys"]
    assert (old.units(None, stored), old.units(stored, marked)) == (2, 2)
    assert (new.units(None, stored), new.units(stored, marked)) == (1, 0)
