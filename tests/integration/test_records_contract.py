"""The record stores' contract (tests/contracts/records.py) on the DynamoDB store, under moto with the
tables template.yaml declares: the in-memory store unit tests use cannot drift from it."""

import pytest

from engram.config import Settings
from engram.store import RecordStore, bind_tables
from tests.contracts.records import *  # noqa: F403 - the contract's tests, collected here
from tests.integration.conftest import TABLES


@pytest.fixture
def records(aws, tmp_path) -> RecordStore:
    bind_tables(
        Settings(memories_table=TABLES["MemoriesTable"], state_table=TABLES["StateTable"], data_dir=tmp_path)
    )
    return RecordStore()
