"""The one owner of DynamoDB: every item kind is read and written here, its keys built in `keys`.
Nothing outside this package imports pynamodb or builds a key (tests/unit/test_store_owns_keys.py)."""

from ..clock import now_ms
from ..record import KINDS, Duplicate, Record, drew_on, fact_tail, new_record, reply_author
from .budget import StepBudget, walk_kind
from .claims import CLAIM_IN_FLIGHT_MS
from .keys import READ_SHARDS, fact_key, source_key
from .lines import LineReads
from .models import bind_tables
from .records import RecordStore
from .state import StateStore

__all__ = [
    "READ_SHARDS",
    "CLAIM_IN_FLIGHT_MS",
    "KINDS",
    "LineReads",
    "Duplicate",
    "Record",
    "reply_author",
    "drew_on",
    "bind_tables",
    "RecordStore",
    "StateStore",
    "StepBudget",
    "walk_kind",
    "fact_key",
    "fact_tail",
    "new_record",
    "now_ms",
    "source_key",
]
