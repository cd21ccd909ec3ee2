"""Which index a listing of a bot's whole kind reads: byKindKeys (keys and scope only) once the table has it
ACTIVE, byKind (the whole item) until then.

byKindKeys replaces byKind in two deploys, as DynamoDB adds or drops one index of a table per update: the
first adds it (DynamoDB fills it from the table, hours at 100 M records, while byKind still answers), the
second drops byKind (`ByKindIndex=drop`, docs/operating.md). A process asks the table once which it has,
and again every RECHECK_S while the new one is not ready."""

from __future__ import annotations

import threading
import time

from pynamodb.indexes import GlobalSecondaryIndex

from .models import MemoryRecord

RECHECK_S = 600.0


class KindIndex:
    def index(self) -> GlobalSecondaryIndex[MemoryRecord]:
        """The index a whole kind is read from now."""
        return MemoryRecord.by_kind_keys if self.keys_ready() else MemoryRecord.by_kind

    def __init__(self) -> None:
        self._ready = False
        self._checked = 0.0
        self._lock = threading.Lock()

    def keys_ready(self) -> bool:
        """Whether byKindKeys can be read (a DescribeTable at most every RECHECK_S until it can)."""
        if self._ready:
            return True
        with self._lock:
            if self._ready:  # found ready by the reader this one waited for
                return True
            now = time.monotonic()
            if self._checked and now - self._checked < RECHECK_S:
                return False
            self._checked = now
            try:
                described = MemoryRecord.describe_table()
            except Exception:  # byKind answers meanwhile; asked again later
                return False
            self._ready = any(
                index.get("IndexName") == "byKindKeys"
                and index.get("IndexStatus", "ACTIVE") == "ACTIVE"
                and not index.get("Backfilling")
                for index in described.get("GlobalSecondaryIndexes") or []
            )
            return self._ready
