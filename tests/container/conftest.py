"""What the container tests share: the lean image (built by `make image`'s script unless it is up to date),
a fake model provider, and a `docker` helper."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("ENGRAM_TEST_IMAGE", "engram:lean")


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="session")
def image():
    """The lean image (EMBEDDER=off), built from the locally made Debian base unless it is up to date."""
    env = {**os.environ, "EMBEDDER": "off", "TAG": IMAGE}
    built = subprocess.run(
        ["sh", "infra/image/build.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return IMAGE


@pytest.fixture(scope="module")
def upstream():
    from tests.fake_upstream import FakeUpstream

    fake = FakeUpstream().start()
    yield fake
    fake.stop()
