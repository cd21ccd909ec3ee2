"""Unit tests: no server, no subprocess, no moto, no model: each part on its own (httpx MockTransport where a
part talks HTTP), the memory rules on the in-memory stores (engram.store.in_memory, held to the DynamoDB
stores by tests/contracts), the embedded index engine on a temporary directory, a deterministic embedder and
a jobs queue in memory. What needs DynamoDB, SQS, a server or a process is in tests/integration. The
fixture below holds every unit test to that: opening a connection or starting a process fails it."""

from __future__ import annotations

import socket
import subprocess

import pytest

from engram.config import Settings
from engram.engine import build_engine
from engram.store.in_memory import InMemoryRecords, InMemoryState
from engram.vectors.edge import EdgeIndex
from tests.support import HashEmbedder, HeldJobs, SwitchableIndex


class NotInAUnitTest(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_network_and_no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise NotInAUnitTest(
            "a unit test opened a connection or started a process: it belongs in integration"
        )

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket.socket, "bind", refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture
def embedder():
    return HashEmbedder()


@pytest.fixture
def jobs():
    return HeldJobs()


@pytest.fixture
def engine(tmp_path, embedder, jobs):
    """An engine on the in-memory stores, the embedded index (which a test can take down) and the fake
    embedder; its jobs are held in `jobs` until a test runs them."""
    index = SwitchableIndex(EdgeIndex(tmp_path / "shard"))
    eng = build_engine(
        Settings(data_dir=tmp_path, api_key="unit-key"),
        index=index,
        embedder=embedder,
        stores=(InMemoryRecords(), InMemoryState()),
        queue=jobs,
    )
    yield eng
    eng.close()


@pytest.fixture
def service(engine):
    return engine.service
