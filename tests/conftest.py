"""Shared fixtures: the repo on sys.path, AWS under moto with tables built from template.yaml."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
# Under xdist (make test: --dist loadgroup) each group runs on one worker, so a module's stack is started
# once and a tier's build (sam build, the images) is made once; the groups are sent out longest first.
WHOLE_TIERS = ("container", "deploy", "browser")  # one group each: they share a build, or a Docker engine
LONG_MODULES = (  # measured with --durations: the integration modules that take longest, started first
    "test_local_stack_process",
    "test_crash_recovery",
    "test_forget_races",
    "test_discord_as_discord",
    "test_forget_residue",
    "test_openapi_contract",
    "test_proxy",
    "test_service",
)


def _group(item) -> tuple[int, str]:
    """(where its group starts, the group) of a collected test."""
    path = Path(str(item.fspath)).relative_to(ROOT / "tests")
    tier = path.parts[0]
    if tier in WHOLE_TIERS:
        return WHOLE_TIERS.index(tier), tier
    if tier == "integration":
        rank = LONG_MODULES.index(path.stem) if path.stem in LONG_MODULES else len(LONG_MODULES)
        return len(WHOLE_TIERS) + rank, path.stem
    return len(WHOLE_TIERS) + len(LONG_MODULES) + 1, tier


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIERS[tier]))
        item.add_marker(pytest.mark.xdist_group(_group(item)[1]))
    items.sort(key=lambda item: _group(item)[0])  # stable: a module's own order is kept
