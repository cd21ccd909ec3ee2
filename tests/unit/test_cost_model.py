"""docs/operating.md's table at 100 M memories is what the load model computes (tests/bench/cost_model.py)."""

from pathlib import Path

from tests.bench.cost_model import AFTER, BEFORE, STORED_MEMORIES, concurrency_table, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def shown(name: str) -> str:
    text = DOC.read_text()
    return text.split(f"<!-- {name}:start -->\n", 1)[1].split(f"\n<!-- {name}:end -->", 1)[0]


def test_the_documented_tables_are_the_models():
    assert shown("cost-model") == table()
    assert shown("concurrency-model") == concurrency_table()


def test_qdrant_holds_a_seventh_of_the_ram_it_did_at_100_m():
    ram_before, _ = BEFORE.gb(STORED_MEMORIES)
    ram_after, disk_after = AFTER.gb(STORED_MEMORIES)
    assert 450 < ram_before < 550  # the review's ~500 GB
    assert ram_after < ram_before / 6 and disk_after > ram_after
