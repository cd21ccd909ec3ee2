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
