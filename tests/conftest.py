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
