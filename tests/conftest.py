"""Shared fixtures: the repo on sys.path, AWS under moto with tables built from template.yaml."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The forget properties' search (tests/integration/test_forget_properties.py): one seed per run, chosen here
# before xdist starts its workers so that they all search with it, and said when the run ends: a
# counterexample found in CI is found again with FORGET_SEED=<it>
os.environ.setdefault("FORGET_SEED", str(random.SystemRandom().randrange(2**32)))


def pytest_terminal_summary(terminalreporter):
    examples = os.environ.get("FORGET_EXAMPLES") or "10"
    terminalreporter.write_line(
        f"forget properties: {examples} programs per engine, FORGET_SEED={os.environ['FORGET_SEED']}"
    )


@pytest.fixture(scope="session")
def local_embedder():
    """The real all-MiniLM-L6-v2, loaded once per session."""
    from engram.embedders.local import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.load()
    return embedder


# Each tier by its directory: a marker to select it by (-m unit, -m "not container") and a per-test timeout
# that a hung test cannot outlive (pytest-timeout; a test may ask for more with @pytest.mark.timeout).
TIERS = {"unit": 30, "integration": 300, "deploy": 600, "browser": 300, "container": 1200}
# Under xdist (make test: --dist loadfile) a module runs on one worker; the longest are sent out first
# (measured with --durations), so two workers finish together.
LONG_MODULES = (
    "test_forget_properties",  # with CI's FORGET_EXAMPLES=200
    "test_forget_crash",
    "test_local_stack_process",
    "test_crash_recovery",
    "test_forget_races",
    "test_discord_as_discord",
    "test_forget_residue",
    "test_discord",
    "test_openapi_contract",
    "test_proxy",
    "test_service",
)


def _rank(item) -> int:
    stem = Path(str(item.fspath)).stem
    return LONG_MODULES.index(stem) if stem in LONG_MODULES else len(LONG_MODULES)


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIERS[tier]))
    items.sort(key=_rank)  # stable: a module's own order is kept
