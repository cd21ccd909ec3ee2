"""The state stores' contract (tests/contracts/state.py) on the DynamoDB stores, under moto with the tables
template.yaml declares: the in-memory stores unit tests use cannot drift from these."""

import pytest

from engram.config import Settings
from engram.store import StateStore, bind_tables
from tests.contracts.state import *  # noqa: F403 - the contract's tests, collected here
from tests.integration.conftest import TABLES


@pytest.fixture
def state(aws, tmp_path) -> StateStore:
    bind_tables(
        Settings(memories_table=TABLES["MemoriesTable"], state_table=TABLES["StateTable"], data_dir=tmp_path)
    )
    return StateStore()
