"""Write units a DynamoDB write costs in the global secondary indexes, as AWS bills them. dynalite answers
`ReturnConsumedCapacity: INDEXES` with the table's units only (measured: a put that lands in three indexes
reports 1 unit, the same as one that lands in none), so a bench that wants the bill adds these itself.

The rules (DynamoDB developer guide, "Provisioned throughput considerations for global secondary indexes"):
an item entering an index costs one write of its projected size there; leaving it, one write of its old
projected size; staying with a changed index key, both; staying with a changed projected attribute, one
write of the new size; anything else nothing. One write unit per KB (rounded up) of the projected item.

`IndexWrites(client, tables)` reads each item before and after a write with the raw client (those reads are
not counted) and returns the units the write cost in every index of its table."""

from __future__ import annotations

import math
from typing import Any

from infra.aws_template import NEW_INSTALLATION, table_definitions

Item = dict[str, dict[str, Any]]


def _value_size(value: dict[str, Any]) -> int:
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode("utf-8"))
    if kind == "N":
        return len(str(v).lstrip("-").replace(".", "")) // 2 + 1
    if kind == "B":
        return len(v)
    if kind in ("SS", "NS", "BS"):
        return sum(_value_size({kind[0]: x}) for x in v)
    if kind == "M":
        return 3 + sum(len(k.encode("utf-8")) + _value_size(x) for k, x in v.items())
    if kind == "L":
        return 3 + sum(1 + _value_size(x) for x in v)
    return 1  # BOOL, NULL


def item_size(item: Item) -> int:
    """An item's size as DynamoDB counts it: each attribute's name and value."""
    return sum(len(name.encode("utf-8")) + _value_size(value) for name, value in item.items())


class _Index:
    def __init__(self, definition: dict, table_keys: list[str]):
        self.keys = [k["AttributeName"] for k in definition["KeySchema"]]
        projection = definition["Projection"]
        self.kind = projection["ProjectionType"]
        self.carried = set(table_keys) | set(self.keys) | set(projection.get("NonKeyAttributes", []))

    def projected(self, item: Item | None) -> Item | None:
        if not item or any(k not in item for k in self.keys):
            return None
        return dict(item) if self.kind == "ALL" else {k: v for k, v in item.items() if k in self.carried}

    def units(self, old: Item | None, new: Item | None) -> int:
        before, after = self.projected(old), self.projected(new)
        if before is None and after is None or before == after:
            return 0
        if before is None or after is None:
            return _units(before or after)
        if any(before[k] != after[k] for k in self.keys):
            return _units(before) + _units(after)
        return _units(after)


def _units(item: Item | None) -> int:
    return max(1, math.ceil(item_size(item or {}) / 1024))


class IndexWrites:
    """The index write units of writes to these tables ({logical name: table name}, as the template
    names them)."""

    def __init__(self, client, tables: dict[str, str]):
        self.client = client
        definitions = table_definitions(parameters=NEW_INSTALLATION)  # as the local stack makes them
        self.keys: dict[str, list[str]] = {}
        self.indexes: dict[str, list[_Index]] = {}
        for logical, name in tables.items():
            args = definitions[logical]
            keys = [k["AttributeName"] for k in args["KeySchema"]]
            self.keys[name] = keys
            self.indexes[name] = [_Index(d, keys) for d in args.get("GlobalSecondaryIndexes", [])]

    def keys_written(self, operation: str, kwargs: dict) -> list[tuple[str, Item]]:
        """(table, key) of every item a write names."""
        if operation == "BatchWriteItem":
            out = []
            for table, requests in kwargs["RequestItems"].items():
                for r in requests:
                    item = r["PutRequest"]["Item"] if "PutRequest" in r else r["DeleteRequest"]["Key"]
                    out.append((table, self._key(table, item)))
            return out
        table = kwargs["TableName"]
        if table not in self.keys:
            return []
        return [(table, self._key(table, kwargs["Item"] if operation == "PutItem" else kwargs["Key"]))]

    def _key(self, table: str, item: Item) -> Item:
        return {k: item[k] for k in self.keys.get(table, []) if k in item}

    def read(self, names: list[tuple[str, Item]]) -> list[Item | None]:
        get = self.client.get_item
        return [
            get(TableName=t, Key=k, ConsistentRead=True).get("Item") if t in self.keys else None
            for t, k in names
        ]

    def units(self, names: list[tuple[str, Item]], before: list[Item | None]) -> int:
        """The index units of a write, given the items before it (read again now, after it)."""
        after = self.read(names)
        return sum(
            index.units(old, new)
            for (table, _), old, new in zip(names, before, after, strict=True)
            for index in self.indexes.get(table, [])
        )
