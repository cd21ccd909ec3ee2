"""The state stores' contract (tests/contracts/state.py) on the in-memory stores unit tests use."""

import pytest

from engram.store.in_memory import InMemoryState
from tests.contracts.state import *  # noqa: F403 - the contract's tests, collected here


@pytest.fixture
def state() -> InMemoryState:
    return InMemoryState()
