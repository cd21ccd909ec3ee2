"""Memory ids made in each process: time-ordered, unique per worker, exact in any JSON reader."""

from __future__ import annotations

from itertools import count

from engram.store.ids import EPOCH_MS, MAX_ID, IdMaker, compose, made_at_ms


def maker(worker: int, clock) -> IdMaker:
    return IdMaker(lambda: worker, clock=clock)


def test_ids_follow_the_clock_and_carry_their_time():
    times = iter([EPOCH_MS + 5_000, EPOCH_MS + 9_000])
    ids = maker(3, lambda: next(times))
    first, second = ids.take(1)[0], ids.take(1)[0]
    assert first < second
    assert made_at_ms(first) == EPOCH_MS + 5_000 and made_at_ms(second) == EPOCH_MS + 9_000


def test_a_burst_in_one_millisecond_stays_unique_and_ascending():
    ids = maker(7, lambda: EPOCH_MS + 1_000)
    made = ids.take(100) + ids.take(100)
    assert made == sorted(made) and len(set(made)) == 200
    # 16 a millisecond: 200 ids borrow the next 12 milliseconds, no more
    assert made_at_ms(made[-1]) - made_at_ms(made[0]) == 12


def test_two_workers_in_the_same_millisecond_never_collide():
    now = EPOCH_MS + 77
    a, b = maker(1, lambda: now), maker(2, lambda: now)
    assert not set(a.take(50)) & set(b.take(50))


def test_the_worker_number_is_taken_once_and_lazily():
    taken = count(1)
    calls = []

    def take_worker() -> int:
        calls.append(1)
        return next(taken)

    ids = IdMaker(take_worker, clock=lambda: EPOCH_MS + 1)
    assert calls == []  # nothing at construction (a snapshot must not capture it)
    ids.take(3)
    ids.take(3)
    assert calls == [1]


def test_every_id_fits_a_javascript_number_until_2094():
    last = compose((1 << 45) - 1, 255)
    assert last == MAX_ID == 2**53 - 1
    year_2094 = 3_913_056_000_000  # 2094-01-01T00:00:00Z
    assert maker(255, lambda: year_2094).take(1)[0] < MAX_ID


def test_ids_are_above_every_counter_made_id():
    # the counter counted from 1; any installation's ids so far sit far below the first made here
    assert maker(0, lambda: EPOCH_MS + 365 * 86_400_000).take(1)[0] > 10**12


def test_a_clock_before_the_epoch_still_gives_positive_ascending_ids():
    ids = maker(0, lambda: 0)
    made = ids.take(3)
    assert made == sorted(made) and made[0] >= 1


def test_a_bots_records_spread_evenly_over_its_keys():
    from collections import Counter

    from engram.store.keys import RECORD_SHARDS, record_pk, record_shard

    one_process = maker(9, lambda: EPOCH_MS + 700 * 86_400_000).take(8_000)  # a burst: consecutive ids
    many = [i for w in range(40) for i in maker(w, lambda w=w: EPOCH_MS + 700 * 86_400_000 + w).take(200)]
    for ids in (one_process, many):
        shares = Counter(record_shard(i) for i in ids)
        assert set(shares) == set(range(RECORD_SHARDS))
        assert max(shares.values()) < 1.25 * len(ids) / RECORD_SHARDS
    assert record_pk("bot1", one_process[0]).startswith("bot1~")


def test_a_counter_made_id_keeps_its_plain_key():
    from engram.store.keys import bot_kind, bot_of, pending_key, record_pk

    assert record_pk("bot1", 41) == "bot1" and bot_kind("bot1", "fact", 41) == "bot1#fact"
    assert pending_key("bot1", 41) == "bot1" and bot_of("bot1~3") == bot_of("bot1") == "bot1"
