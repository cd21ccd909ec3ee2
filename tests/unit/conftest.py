"""Unit tests: no server, no subprocess, no moto, no model: each part on its own (httpx MockTransport where a
part talks HTTP). What needs a store, an index or a process is in tests/integration. The fixture below holds
every unit test to that: opening a connection or starting a process fails it."""

from __future__ import annotations

import socket
import subprocess

import pytest


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
