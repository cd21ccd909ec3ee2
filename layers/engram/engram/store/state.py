"""Everything in StateTable that is not a record's bookkeeping: embedder settings, Discord consent,
backfill runs, cursors, tokens, seen interactions, export limits, LibreChat users' memory settings, and
the tombstones forgets leave. Domain code reaches them only through `StateStore`."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

from pynamodb.expressions.update import Action

from . import keys
from .dynamo import attempt, guard
from .models import StateItem
from .spread import PlainKey


def _batch_get(item_keys: list[tuple[str, str]], consistent: bool = False) -> list[StateItem]:
    return list(StateItem.batch_get(item_keys, consistent_read=consistent))


def _get(pk: str, sk: str) -> StateItem | None:
    try:
        return StateItem.get(pk, sk, consistent_read=True)
    except StateItem.DoesNotExist:
        return None


PLAN_PREFIX = "plan#"  # a backfill run's planning steps, kept with its channels counted done
FOLLOWED = "followed#"  # in a re-embed pass's members once what follows its last chain was done
FINAL_SAID = "final#said"  # in a run's members while its final message is being (or has been) sent


def _later(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return a if int(a) >= int(b) else b


def merge_seen(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two records of what catch-up knows of a channel as one: each time and id the later of the two (none
    ever moves back)."""
    out = {**a, **b}
    for name in ("newest", "storedAt", "windowAt"):
        if name in a or name in b:
            out[name] = _later(a.get(name), b.get(name))
    return out


def move_channel(spread_pk: str, item: StateItem) -> None:
    """A channel's state under the plain key merged into its spread item, then deleted (nothing writes the
    plain key any more, so a move cut off anywhere is made again, the same)."""
    spread = _get(spread_pk, item.sk)
    merged = merge_seen(dict(spread.data or {}) if spread is not None else {}, dict(item.data or {}))
    StateItem(spread_pk, item.sk, data=merged).save()
    StateItem(item.pk, item.sk).delete()


class ChainEnd(NamedTuple):
    """A re-embed pass told that one of its chains is through."""

    left: int  # chains still running
    followed: bool  # what follows the pass's last chain was done


class StateStore:
    """Reads and writes StateTable items by what they mean; every key comes from `keys`."""

    _guard = staticmethod(guard)
    # where channels' catch-up state sits (spread; older items under the plain key): one per process
    channel_keys = PlainKey(keys.channels_pk, move_channel)

    # ----- embedder settings -------------------------------------------------------------------------

    def embedding_settings(self) -> dict[str, Any] | None:
        """The stored embedder settings, or None (the environment's defaults apply)."""
        item = self._guard(lambda: _get(*keys.EMBEDDING_SETTINGS))
        return item.data if item is not None else None

    def save_embedding_settings(self, data: dict[str, Any]) -> None:
        self._guard(lambda: StateItem(*keys.EMBEDDING_SETTINGS, data=data).save())

    # ----- re-embedding ---------------------------------------------------------------------------------

    def start_reembed(self, vector: str, chains: int) -> None:
        """A re-embedding for `vector` runs `chains` chains in parallel (an earlier plan's count replaced)."""
        self._guard(lambda: StateItem(*keys.reembed_run(vector), value=chains).save())

    def reembed_left(self, vector: str) -> int:
        """How many chains of a re-embedding's pass are still running (0: none on record)."""
        item = self._guard(lambda: _get(*keys.reembed_run(vector)))
        return int(item.value or 0) if item is not None else 0

    def end_reembed_chain(self, vector: str, chain: str) -> ChainEnd | None:
        """One chain is through: how many are left, counting it once (a redelivery is told how many are
        left, its count made already), and whether what follows the pass's last chain (the next pass
        planned, or the change finished) was done: the last chain's redelivery does it when its first
        delivery was cut off. None: no plan is on record. One conditional update."""
        item = StateItem(*keys.reembed_run(vector))
        done = attempt(
            lambda: item.update(
                actions=[StateItem.value.add(-1), StateItem.members.add({chain})],
                condition=StateItem.pk.exists() & ~StateItem.members.contains(chain),
            )
        )
        held = item if done else self._guard(lambda: _get(*keys.reembed_run(vector)))
        if held is None or chain not in (held.members or ()):
            return None
        return ChainEnd(int(held.value or 0), FOLLOWED in (held.members or ()))

    def mark_reembed_followed(self, vector: str) -> None:
        item = StateItem(*keys.reembed_run(vector))
        followed: list[Action] = [StateItem.members.add({FOLLOWED})]
        attempt(lambda: item.update(actions=followed, condition=StateItem.pk.exists()))

    # ----- tombstones ----------------------------------------------------------------------------------

    def mark_forgotten(self, bot: str, user: str, at: int) -> None:
        """Leave the tombstone of a forget (kept: it is what a restore from backup re-applies)."""
        self._guard(lambda: StateItem(*keys.tombstone(bot, user), value=at).save())

    def forgotten(self, bot: str, users: set[str] | list[str]) -> dict[str, int]:
        """When each of these users was last forgotten in this bot (users never forgotten left out)."""
        users = [u for u in dict.fromkeys(users) if u]
        if not users:
            return {}
        if len(users) == 1:
            item = self._guard(lambda: _get(*keys.tombstone(bot, users[0])))
            return {users[0]: int(item.value)} if item is not None else {}
        return self._guard(
            lambda: {
                i.sk: int(i.value)
                for i in StateItem.batch_get([keys.tombstone(bot, u) for u in users], consistent_read=True)
            }
        )

    # ----- forgets under way -----------------------------------------------------------------------------

    def begin_forget(self, bot: str, user: str, at: int, touched: int) -> None:
        """A forget of `user` (made at `at`) is under way: reads hide them until `end_forget`."""
        self._guard(
            lambda: StateItem(*keys.forgetting(bot, user), value=at, data={"touched": touched}).save()
        )

    def forgets_under_way(self, bot: str) -> dict[str, tuple[int, int]]:
        """The users of a bot whose forget has not finished: {user: (forget time, last progress)}. One
        strongly consistent query of a partition that is empty unless a forget is running or was cut off."""
        return self._guard(
            lambda: {
                i.sk: (int(i.value), int((i.data or {}).get("touched", i.value)))
                for i in StateItem.query(keys.forgetting_pk(bot), consistent_read=True)
            }
        )

    def end_forget(self, bot: str, user: str, at: int) -> None:
        """The forget made at `at` is complete (a later forget of the same user, begun meanwhile, stays)."""
        attempt(lambda: StateItem(*keys.forgetting(bot, user)).delete(condition=StateItem.value <= at))

    @staticmethod
    def tombstones_in_table(dynamodb_client: Any, table: str) -> list[tuple[str, str, int]]:
        """Every forget recorded in a state table, any bot: (bot, user, when). Read with a plain client, so
        it works on a table the stack is not bound to (the live one, while a restored copy is checked)."""
        out = []
        for page in dynamodb_client.get_paginator("scan").paginate(
            TableName=table,
            FilterExpression="begins_with(pk, :p)",
            ExpressionAttributeValues={":p": {"S": keys.TOMBSTONE_PREFIX}},
        ):
            for item in page["Items"]:
                bot = keys.tombstone_bot(item["pk"]["S"])
                if bot is not None:
                    out.append((bot, item["sk"]["S"], int(item["value"]["N"])))
        return sorted(out, key=lambda t: t[2])

    # ----- Discord: consent and backfill ---------------------------------------------------------------

    def consent(self, bot: str, user: str) -> dict[str, Any] | None:
        """A user's consent ({"consentedAt"}), or None."""
        item = self._guard(lambda: _get(*keys.consent(bot, user)))
        return {"value": int(item.value or 0), **(item.data or {})} if item is not None else None

    def consenting(self, bot: str, users: set[str]) -> set[str]:
        """Which of `users` have opted in, read now, not cached (one batch of their keys: never every
        consent of the bot)."""
        wanted = [u for u in users if u]
        if not wanted:
            return set()
        found = self._guard(
            lambda: list(StateItem.batch_get([keys.consent(bot, u) for u in wanted], consistent_read=True))
        )
        return {i.sk.split("#", 1)[1] for i in found}

    def _consents(self, bot: str, after: str | None = None, limit: int | None = None) -> list[StateItem]:
        """The bot's consents in key order, from after the consent key `after`, at most `limit`."""
        condition = (
            StateItem.sk.startswith(keys.CONSENT_PREFIX)
            if after is None
            else StateItem.sk.between(after + "\x00", keys.CONSENT_PREFIX + "\uffff")
        )
        return self._guard(
            lambda: list(StateItem.query(keys.discord_pk(bot), condition, consistent_read=True, limit=limit))[
                :limit
            ]
        )

    def anyone_consenting(self, bot: str) -> bool:
        """Whether anyone has opted in: one item read, however many have."""
        return bool(self._consents(bot, limit=1))

    def consent_guilds_page(
        self, bot: str, after: str | None, limit: int
    ) -> tuple[list[list[str] | None], str | None]:
        """A page of consents' server lists (None for one given before engram kept them), and the key to
        read on from (None: the last page)."""
        page = self._consents(bot, after, limit)
        lists = [(i.data or {}).get("guilds") for i in page]
        return lists, (page[-1].sk if len(page) == limit else None)

    def give_consent(self, bot: str, user: str, at: int, guilds: list[str] | None = None) -> None:
        """Opt a user in; `guilds`: the servers they are a member of (what catch-up reads for them)."""
        data = {"consentedAt": at, **({"guilds": sorted(guilds)} if guilds is not None else {})}
        self._guard(lambda: StateItem(*keys.consent(bot, user), value=1, data=data).save())
        self.add_to_roster(bot, guilds or [])

    def add_consent_guilds(self, bot: str, user: str, guilds: list[str]) -> None:
        """Servers a consenting user is in that their consent does not name yet (found by their remember's
        later jobs, or they joined after opting in)."""
        item = self._guard(lambda: _get(*keys.consent(bot, user)))
        data = dict(item.data or {}) if item is not None else None
        if data is None or "guilds" not in data or set(guilds) <= set(data["guilds"]):
            return
        data["guilds"] = sorted({*data["guilds"], *guilds})
        kept = attempt(
            lambda: StateItem(*keys.consent(bot, user), value=1, data=data).save(
                condition=StateItem.pk.exists()
            )
        )  # a forget meanwhile wins: no consent is written back
        if kept:
            self.add_to_roster(bot, guilds)

    # ----- Discord: the roster of servers a catch-up tick visits ------------------------------------------

    def add_to_roster(self, bot: str, guilds: list[str]) -> None:
        """Servers some opted-in user is in (kept after they leave or are forgotten: a guild id names no
        one, and a visit to a server with no one opted in stores nothing)."""
        if not guilds:
            return

        def run() -> None:
            with StateItem.batch_write() as batch:
                for guild in sorted(set(guilds)):
                    batch.save(StateItem(keys.roster_pk(bot), guild))

        self._guard(run)

    def drop_from_roster(self, bot: str, guild: str) -> None:
        """A server the bot is no longer in."""
        self._guard(StateItem(keys.roster_pk(bot), guild).delete)

    def roster_page(self, bot: str, after: str | None, limit: int) -> list[str]:
        """Up to `limit` servers of the roster in key order, from after `after` (one query, `limit` items)."""
        condition = None if after is None else StateItem.sk > after
        return self._guard(
            lambda: [i.sk for i in StateItem.query(keys.roster_pk(bot), condition, limit=limit)][:limit]
        )

    def roster_mark(self, bot: str) -> dict[str, Any]:
        """{"after": the last server visited, "turn": the tick's number, "built": whether every consent
        given before the roster existed is in it, "consentsAfter": how far that was read}."""
        item = self._guard(lambda: _get(*keys.roster_mark(bot)))
        return dict(item.data or {}) if item is not None else {}

    def set_roster_mark(self, bot: str, mark: dict[str, Any]) -> None:
        self._guard(lambda: StateItem(*keys.roster_mark(bot), data=mark).save())

    def backfill_run(self, bot: str, user: str) -> dict[str, Any] | None:
        """The user's latest backfill run: {"run", "left", "count", "channels", "done", "issuedAt"}, or
        None. `left` counts channels still to read and the planning jobs still to run (servers to look
        through); `channels` the channels found so far, `done` those finished."""
        item = self._guard(lambda: _get(*keys.backfill_run(bot, user)))
        if item is None:
            return None
        data = dict(item.data or {})
        return {
            "run": item.tag,
            "left": int(item.value or 0),
            "count": int(item.tally or 0),
            **data,
            "channels": int(item.planned if item.planned is not None else data.get("channels", 0)),
            "done": len([m for m in item.members or () if not m.startswith(PLAN_PREFIX) and m != FINAL_SAID]),
        }

    def start_backfill_run(
        self, bot: str, user: str, run: str, channels: int, issued_at: int, planning: int = 0
    ) -> None:
        """A new run (replacing the last): `channels` to read, and `planning` jobs still to find more."""
        self._guard(
            lambda: StateItem(
                *keys.backfill_run(bot, user),
                value=channels + planning,
                planned=channels,
                tally=0,
                tag=run,
                data={"issuedAt": issued_at},
            ).save()
        )

    def plan_backfill(
        self, bot: str, user: str, run: str, step: str, channels: int, planning: int
    ) -> dict[str, Any] | None:
        """A planning job of a run is done: it found `channels` more to read and queued `planning` more
        planning jobs. One conditional update (a duplicate delivery counts nothing twice), made before the
        jobs it found are queued: the run cannot look finished while they wait. None when the run is not
        this one any more (replaced, forgotten) or this step was counted already."""
        return self._count_run(
            bot,
            user,
            run,
            PLAN_PREFIX + step,
            [StateItem.value.add(channels + planning - 1), StateItem.planned.add(channels)],
        )

    def count_backfill(
        self, bot: str, user: str, run: str, channel: str, stored: int, finished: bool
    ) -> dict[str, Any] | None:
        """Add to a run's count (and, once per channel, count the channel done): one conditional update.
        None when a newer run (or a forget) replaced it, or this channel was counted already."""
        actions: list[Action] = [StateItem.tally.add(stored)]
        if not finished:
            return self._count_run(bot, user, run, None, actions)
        return self._count_run(bot, user, run, channel, actions + [StateItem.value.add(-1)])

    def _count_run(
        self, bot: str, user: str, run: str, once: str | None, actions: list[Action]
    ) -> dict[str, Any] | None:
        """An update of the run, made at most once per name `once` (kept in the run's members)."""
        item = StateItem(*keys.backfill_run(bot, user))
        condition = StateItem.tag == run
        if once is not None:
            actions = actions + [StateItem.members.add({once})]
            condition &= ~StateItem.members.contains(once)
        if not attempt(lambda: item.update(actions=actions, condition=condition)):
            return None
        return {"left": int(item.value), "count": int(item.tally or 0), **(item.data or {})}

    def claim_final(self, bot: str, user: str, run: str) -> dict[str, Any] | None:
        """The right to send a finished run's one final message: one conditional update, made while the run
        is this one, has nothing left and no job holds that right. Counting and saying are apart, so a job
        whose count finished the run but whose message failed (a timeout on the way to Discord) leaves the
        message to its redelivery, which finds its count made already. None when it is not this job's."""
        item = StateItem(*keys.backfill_run(bot, user))
        condition = (StateItem.tag == run) & (StateItem.value == 0) & ~StateItem.members.contains(FINAL_SAID)
        claim: list[Action] = [StateItem.members.add({FINAL_SAID})]
        if not attempt(lambda: item.update(actions=claim, condition=condition)):
            return None
        return {"left": 0, "count": int(item.tally or 0), **(item.data or {})}

    def release_final(self, bot: str, user: str, run: str) -> None:
        """The final message was not sent: the next delivery of the job may claim it again."""
        item = StateItem(*keys.backfill_run(bot, user))
        give_back: list[Action] = [StateItem.members.delete({FINAL_SAID})]
        attempt(lambda: item.update(actions=give_back, condition=StateItem.tag == run))

    def keep_token(self, bot: str, user: str, run: str, token: str, expires_s: int) -> None:
        """An interaction token for a run's last word, in its own item with a TTL."""
        self._guard(
            lambda: StateItem(*keys.token(bot, user, run), data={"token": token}, expires_at=expires_s).save()
        )

    def token(self, bot: str, user: str, run: str, now_s: int) -> str | None:
        """The run's token while it is valid (DynamoDB's TTL deletes late, dynalite never)."""
        item = self._guard(lambda: _get(*keys.token(bot, user, run)))
        if item is None:
            return None
        if int(item.expires_at or 0) <= now_s:
            self._guard(item.delete)
            return None
        return (item.data or {}).get("token")

    def cursor(self, bot: str, user: str, channel: str) -> dict[str, Any] | None:
        """A user's backfill cursor in one channel ({"before", "done", "run", "step"}), or None."""
        item = self._guard(lambda: _get(keys.cursors_pk(bot, user), channel))
        return dict(item.data or {}) if item is not None else None

    def save_cursor(self, bot: str, user: str, channel: str, state: dict[str, Any]) -> None:
        self._guard(lambda: StateItem(keys.cursors_pk(bot, user), channel, data=state).save())

    def mark_cursor_queued(self, bot: str, user: str, channel: str, saved: dict[str, Any]) -> bool:
        """The cursor marked: its next link is queued. Only while it is still the one `saved` (the next link
        may have moved it on already, a forget deleted it): False when it is not."""
        item = StateItem(keys.cursors_pk(bot, user), channel, data={**saved, "queued": True})
        return attempt(lambda: item.save(condition=StateItem.data == saved))

    def channel_newest(self, bot: str, channel: str) -> str | None:
        """The newest message id seen in a channel (where catch-up starts)."""
        return self.channel_seen(bot, channel).get("newest")

    def channel_seen(self, bot: str, channel: str) -> dict[str, Any]:
        """What catch-up knows of a channel: {"newest": id, "storedAt": ms of the newest message stored
        from it, "windowAt": ms of its last window re-read (s before)}, each key only once known."""
        # read strongly consistent, as before: see_channel writes back what it reads
        return self.channels_seen(bot, [channel], consistent=True).get(channel, {})

    def channels_seen(
        self, bot: str, channels: list[str], consistent: bool = False
    ) -> dict[str, dict[str, Any]]:
        """channel_seen of each of these channels (batched reads; unseen ones left out)."""
        wanted = [(pk, c) for c in dict.fromkeys(channels) for pk in self.channel_keys.lookups(bot, c)]
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), 100):
            for i in self._guard(partial(_batch_get, wanted[start : start + 100], consistent)):
                # under the spread key and the plain one until the spread pass: merged
                out[i.sk] = merge_seen(out.get(i.sk, {}), dict(i.data or {}))
        return out

    def see_channel(self, bot: str, channel: str, **changes: Any) -> None:
        """Merge what was just learnt of a channel (newest never moves back, storedAt never either)."""
        # One small item per channel, written by that channel's catch-up job; a lost race costs one re-read
        current = self.channel_seen(bot, channel)
        merged = merge_seen(current, changes)
        if merged != current:
            self._guard(lambda: StateItem(*keys.channel_seen(bot, channel), data=merged).save())

    def remember_newest(self, bot: str, channel: str, message_id: str) -> None:
        """Move a channel's newest seen id forward (never back)."""
        self.see_channel(bot, channel, newest=message_id)

    def note_change(self, bot: str, at: int) -> None:
        """A memory of the bot was removed or changed at `at` (ms): caches of recalls made before are stale,
        on every instance."""
        self._guard(lambda: StateItem(*keys.last_change(bot), value=at).save())

    def last_change(self, bot: str) -> int:
        """When a memory of the bot was last removed or changed (0: never)."""
        item = self._guard(lambda: _get(*keys.last_change(bot)))
        return int(item.value) if item is not None and item.value is not None else 0

    def sweep_mark(self, bot: str) -> tuple[int, int] | None:
        """(the last pending id the sweep queued, when its pass over the bot's pending records began)."""
        item = self._guard(lambda: _get(*keys.sweep_mark(bot)))
        if item is None or item.value is None:
            return None
        return int(item.value), int((item.data or {}).get("since") or 0)

    def set_sweep_mark(self, bot: str, through: int, since: int) -> None:
        """The sweep has queued the bot's pending records up to `through`, in a pass begun at `since`."""
        self._guard(lambda: StateItem(*keys.sweep_mark(bot), value=through, data={"since": since}).save())

    def lower_sweep_mark(self, bot: str, through: int) -> None:
        """Records above `through` go back to the sweep (an index job ran and could not finish them)."""
        mark = self.sweep_mark(bot)
        if mark is not None and mark[0] > through:
            self.set_sweep_mark(bot, max(through, 0), mark[1])

    def take_rate_slot(self, bot: str, window: int, limit: int, expires_s: int) -> bool:
        """Count one Discord request in a window shared by every process of the bot: False when the window
        already holds `limit` (one conditional update; the item expires with the window)."""
        item = StateItem(*keys.rate_window(bot, window))
        return attempt(
            lambda: item.update(
                actions=[StateItem.tally.add(1), StateItem.expires_at.set(expires_s)],
                condition=StateItem.tally.does_not_exist() | (StateItem.tally < limit),
            )
        )

    def note_recent(
        self, bot: str, channel: str, entries: list[tuple[str, int, str, int]], stored_at: int
    ) -> None:
        """Messages just stored (or edited) from a channel: (message id, record id, edited time, expires
        s)."""
        if not entries:
            return
        pk = keys.recent_pk(bot, channel)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for message, record, edited, expires in entries:
                    batch.save(StateItem(pk, message, memory_id=record, tag=edited, expires_at=expires))

        self._guard(run)
        self.see_channel(bot, channel, storedAt=stored_at)

    def recent(self, bot: str, channel: str, now_s: int) -> dict[str, tuple[int, str]]:
        """{message id: (record id, edited time)} of a channel's messages stored lately and not expired
        (DynamoDB's TTL deletes late, dynalite never)."""
        return self._guard(
            lambda: {
                i.sk: (int(i.memory_id), i.tag or "")
                for i in StateItem.query(keys.recent_pk(bot, channel))
                if int(i.expires_at or 0) > now_s
            }
        )

    def drop_recent(self, bot: str, channel: str, messages: list[str]) -> None:
        """Stop watching these messages of a channel (deleted, or out of the window)."""
        if not messages:
            return
        pk = keys.recent_pk(bot, channel)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for message in messages:
                    batch.delete(StateItem(pk, message))

        self._guard(run)

    def note_content_intent(self, bot: str, on: bool, how: str, at: int) -> None:
        """Remember whether the app can read message text, and how that was learnt (flags, or a page of
        other people's messages that all came back empty)."""
        self._guard(
            lambda: StateItem(*keys.content_intent(bot), value=int(on), data={"how": how, "at": at}).save()
        )

    def content_intent(self, bot: str) -> dict[str, Any] | None:
        """{"on", "how", "at"} as last noted, or None (never checked)."""
        item = self._guard(lambda: _get(*keys.content_intent(bot)))
        return {"on": bool(item.value), **(item.data or {})} if item is not None else None

    def mark_unreadable(self, bot: str, channel: str, reason: str, retry_at_s: int) -> None:
        """A channel Discord would not let the bot read, and when to try it again."""
        self._guard(lambda: StateItem(keys.unreadable_pk(bot), channel, value=retry_at_s, tag=reason).save())

    def unreadable(self, bot: str, channels: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """The channels marked unreadable, {channel: {"reason", "retryAt"}}: of these `channels` (one batch
        of their keys: a server's visit reads its own, never the bot's every mark), or all (one query)."""
        if channels is not None:
            wanted = [(keys.unreadable_pk(bot), c) for c in dict.fromkeys(channels)]
            found = self._guard(lambda: _batch_get(wanted)) if wanted else []
        else:
            found = self._guard(lambda: list(StateItem.query(keys.unreadable_pk(bot))))
        return {i.sk: {"reason": i.tag, "retryAt": int(i.value or 0)} for i in found}

    def readable_again(self, bot: str, channel: str) -> None:
        self._guard(StateItem(keys.unreadable_pk(bot), channel).delete)

    def first_sight(self, bot: str, interaction_id: str, expires_s: int) -> bool:
        """True the first time an interaction id is seen (a conditional write of a short-lived item)."""
        return attempt(
            lambda: StateItem(*keys.seen_interaction(bot, interaction_id), expires_at=expires_s).save(
                condition=StateItem.pk.does_not_exist()
            )
        )

    def take_export_slot(self, bot: str, user: str, now: int, every_s: int) -> bool:
        """At most one export per `every_s` per user: False when one was taken too recently."""
        return attempt(
            lambda: StateItem(
                *keys.export_limit(bot, user), value=now, expires_at=now // 1000 + every_s
            ).save(condition=StateItem.sk.does_not_exist() | (StateItem.value < now - every_s * 1000))
        )

    def release_export_slot(self, bot: str, user: str) -> None:
        """Give the export slot back (the export could not be delivered)."""
        self._guard(StateItem(*keys.export_limit(bot, user)).delete)

    # ----- LibreChat users' memory settings -----------------------------------------------------------

    def chat_settings(self, bot: str, user: str) -> dict[str | None, Any]:
        """{conversation: 0|1} as stored, the user's default under None."""
        items = self._guard(lambda: list(StateItem.query(keys.chat_settings_pk(bot, user))))
        return {keys.conversation_of(i.sk): i.value for i in items}

    def set_chat_setting(self, bot: str, user: str, conversation: str | None, enabled: bool | None) -> None:
        """Set (or with None, drop) a chat's setting, or the user's default (conversation None)."""
        item = StateItem(
            keys.chat_settings_pk(bot, user),
            keys.chat_setting_sk(conversation),
            value=int(enabled) if enabled is not None else None,
        )
        self._guard(item.delete if enabled is None else item.save)

    # ----- forget ---------------------------------------------------------------------------------------

    def forget_user(self, bot: str, user: str) -> dict[str, int]:
        """Delete every state item about a user of a bot: Discord consent, backfill run, export limit,
        tokens and cursors; LibreChat memory settings. Returns how many of each kind went."""
        discord = keys.discord_pk(bot)
        singles = {
            "consent": keys.consent(bot, user),
            "backfill": keys.backfill_run(bot, user),
            "exportLimit": keys.export_limit(bot, user),
        }

        def run() -> dict[str, int]:
            out = {}
            present = {(i.pk, i.sk) for i in StateItem.batch_get(list(singles.values()))}
            groups = {
                "tokens": list(StateItem.query(discord, StateItem.sk.startswith(keys.tokens_prefix(user)))),
                "cursors": list(StateItem.query(keys.cursors_pk(bot, user))),
                "chatSettings": list(StateItem.query(keys.chat_settings_pk(bot, user))),
            }
            with StateItem.batch_write() as batch:
                for name, key in singles.items():
                    out[name] = int(key in present)
                    if key in present:
                        batch.delete(StateItem(*key))
                for name, items in groups.items():
                    out[name] = len(items)
                    for item in items:
                        batch.delete(item)
            return out

        return self._guard(run)
