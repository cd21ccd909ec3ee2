"""The forgets a bot has made: tombstones (kept for good) and forgets still under way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ...bookkeeping import ForgetUnderWay, Tombstone
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get


class ScanClient(Protocol):
    """What reading a whole table needs of a boto3 DynamoDB client."""

    def get_paginator(self, operation_name: str) -> _Paginator: ...


class _Paginator(Protocol):
    def paginate(self, **kwargs: object) -> Iterable[dict[str, list[dict[str, dict[str, str]]]]]: ...


class Tombstones:
    """When each user of a bot was last forgotten (what every write is checked against, and what a
    restore from backup re-applies), and the forgets not finished yet (reads hide their users)."""

    def mark(self, bot: str, user: str, at: int) -> None:
        """Leave the tombstone of a forget (kept: it is what a restore from backup re-applies)."""
        guard(lambda: StateItem(*keys.tombstone(bot, user), value=at).save())

    def when(self, bot: str, users: Iterable[str]) -> dict[str, int]:
        """When each of these users was last forgotten in this bot (users never forgotten left out)."""
        wanted = [u for u in dict.fromkeys(users) if u]
        if not wanted:
            return {}
        if len(wanted) == 1:
            item = guard(lambda: get(*keys.tombstone(bot, wanted[0])))
            return {wanted[0]: int(item.value)} if item is not None and item.value is not None else {}
        return guard(
            lambda: {
                i.sk: int(i.value)
                for i in StateItem.batch_get([keys.tombstone(bot, u) for u in wanted], consistent_read=True)
                if i.value is not None
            }
        )

    def begin(self, bot: str, user: str, at: int, touched: int) -> None:
        """A forget of `user` (made at `at`) is under way: reads hide them until `end`."""
        guard(lambda: StateItem(*keys.forgetting(bot, user), value=at, data={"touched": touched}).save())

    def page(self, bot: str, after: str | None, limit: int) -> list[tuple[str, int]]:
        """The bot's tombstones, (user, when), in user order after `after` (what an export carries)."""
        pk = keys.tombstone(bot, "")[0]
        condition = StateItem.sk > after if after is not None else None
        return guard(
            lambda: [
                (i.sk, int(i.value))
                for i in StateItem.query(pk, range_key_condition=condition, limit=limit, consistent_read=True)
                if i.value is not None
            ]
        )

    def under_way(self, bot: str) -> dict[str, ForgetUnderWay]:
        """The users of a bot whose forget has not finished. One strongly consistent query of a partition
        that is empty unless a forget is running or was cut off."""
        return guard(
            lambda: {
                i.sk: ForgetUnderWay(int(i.value or 0), int((i.data or {}).get("touched", i.value) or 0))
                for i in StateItem.query(keys.forgetting_pk(bot), consistent_read=True)
            }
        )

    def end(self, bot: str, user: str, at: int) -> None:
        """The forget made at `at` is complete (a later forget of the same user, begun meanwhile, stays)."""
        attempt(lambda: StateItem(*keys.forgetting(bot, user)).delete(condition=StateItem.value <= at))

    @staticmethod
    def in_table(dynamodb_client: ScanClient, table: str) -> list[Tombstone]:
        """Every forget recorded in a state table, any bot, oldest first. Read with a plain client, so it
        works on a table the stack is not bound to (the live one, while a restored copy is checked)."""
        out = []
        for page in dynamodb_client.get_paginator("scan").paginate(
            TableName=table,
            FilterExpression="begins_with(pk, :p)",
            ExpressionAttributeValues={":p": {"S": keys.TOMBSTONE_PREFIX}},
        ):
            for item in page["Items"]:
                bot = keys.tombstone_bot(item["pk"]["S"])
                if bot is not None:
                    out.append(Tombstone(bot, item["sk"]["S"], int(item["value"]["N"])))
        return sorted(out, key=lambda f: f.at)
