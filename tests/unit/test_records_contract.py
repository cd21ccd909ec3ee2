"""The record stores' contract (tests/contracts/records.py) on the in-memory store unit tests use."""

import pytest

from engram.store.in_memory import InMemoryRecords
from tests.contracts.records import *  # noqa: F403 - the contract's tests, collected here


@pytest.fixture
def records() -> InMemoryRecords:
    return InMemoryRecords()
