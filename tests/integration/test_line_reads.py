"""A maintenance step's line reads (issue 32, part 5): each line read once for all the step's pages
(store/lines.py), giving each page what a fresh read of the byLine index gives, in far fewer queries; a
rebuild through them writes every point's words exactly as the live writes did; and nothing deleted
meanwhile comes back through them."""

from __future__ import annotations

import random

import pytest

import engram.keeper
from engram.embedders import NoEmbedder
from engram.line_spans import line_around
from engram.service import ChatMessage
from engram.store import READ_SHARDS
from engram.store.lines import LineReads, span_ids
from engram.vectors import Scope

BOT = "lines"
START = 1_767_225_600_000


def _chat(service, n: int, threads: int = 3, seed: int = 7) -> list:
    """`n` messages over `threads` threads, in one import, some turns sharing a millisecond (a backfill
    page gives a burst one time): the records, oldest first."""
    rng = random.Random(seed)
    at, messages = START, []
    for i in range(n):
        at += rng.choice([0, 0, 1, 5, 1000])
        messages.append(
            ChatMessage(
                source_id=f"m{i}",
                text=f"turn {i} about {rng.choice(['boats', 'tea', 'rain', 'trains'])}",
                user=f"u{i % 4}",
                thread=f"t{rng.randrange(threads)}",
                created_at=at,
            )
        )
    service.add_messages(BOT, messages)
    return sorted(service.records.newest(BOT, "message", n + 10), key=lambda r: (r.created_at, r.id))


def _windows(line: list, points: list[tuple[int, int]], reach: int) -> list[int]:
    """The ids within `reach` turns of each point, in the line's order (createdAt, ties by id): from the line
    itself."""
    rows = sorted((r.created_at, r.id) for r in line)
    keep = {n for p in points for n in range(max(0, rows.index(p) - reach), rows.index(p) + reach + 1)}
    return [rows[n][1] for n in sorted(keep) if n < len(rows)]


@pytest.mark.parametrize("ahead", [2, 5, 128])
def test_a_step_s_reads_give_each_page_its_windows_in_fewer_queries_than_fresh_reads(service, ahead):
    records = _chat(service, 120)
    lines: dict[str, list] = {}
    for r in records:
        lines.setdefault(r.line, []).append(r)
    reads, fresh_queries = LineReads(ahead=ahead), 0
    reach = 4
    # pages newest first, as a step walks them (a record or three of a line a page), then a jump back
    pages = []
    for line_name, line in lines.items():
        for end in range(len(line), 0, -3):
            pages.append((line_name, [(r.created_at, r.id) for r in line[max(0, end - 3) : end]]))
    newest = lines[pages[0][0]][-1]
    pages.append((pages[0][0], [(newest.created_at, newest.id)]))
    for line_name, points in pages:
        got = reads.around(line_name, points, reach)
        assert got == _windows(lines[line_name], points, reach), (line_name, points)
        # each page's windows read fresh: the span and each of its edges (span_ids)
        assert set(got) <= set(span_ids(line_name, points[0][0], points[-1][0], reach))
        fresh_queries += 3
    if ahead == 128:  # a short read-ahead is there to take every path of the reading on
        assert reads.queries < fresh_queries / 4, (reads.queries, fresh_queries)


def test_a_step_reads_the_windows_of_a_page_s_records_and_not_the_span_between_them(service):
    """A page of one key of the kind holds a few records of a line, far apart (the line's other keys'
    records between them): what is read is each one's window, in the line's order (ties by id), and a
    record not yet in the index is given the turns either side of where it belongs."""
    line = _chat(service, 120, threads=1)
    rows = [(r.created_at, r.id) for r in line]
    reach, picked = 2, [0, 10, 50, 52, 119]
    missing = (line[30].created_at, line[30].id + 1)  # written a moment ago, in no index yet
    assert missing not in rows
    got = LineReads().around(line[0].line, [rows[n] for n in picked] + [missing], reach)
    at = sorted(rows + [missing]).index(missing)  # its place: `at` rows before it
    expected = {n for p in picked for n in range(max(0, p - reach), min(len(rows), p + reach + 1))}
    expected |= set(range(at - reach, at + reach))
    assert got == [rows[n][1] for n in sorted(expected)]
    first = line_around(service.records, [line[10], line[50]], reach, LineReads())[line[0].line]
    assert [r.id for r in first] == [rows[n][1] for n in [*range(8, 13), *range(48, 53)]]


def test_a_record_deleted_during_a_step_is_not_brought_back_by_its_line(service):
    records = _chat(service, 30, threads=1)
    reads = LineReads()
    middle = records[15]
    first = line_around(service.records, [middle], 4, reads)[middle.line]
    gone = records[14]
    assert gone.id in {r.id for r in first}
    service.records.delete([gone])  # the line's ids are known to the step; the record is read afresh
    again = line_around(service.records, [middle], 4, reads)[middle.line]
    assert gone.id not in {r.id for r in again} and len(again) == len(first) - 1


def test_a_rebuild_through_shared_reads_writes_every_point_s_words_as_the_live_writes_did(
    words_only, monkeypatch, engine
):
    index = words_only.indexer.index
    written: dict[int, object] = {}
    upsert, set_vectors = index.upsert, index.set_vectors

    def recording_upsert(points):
        written.update({p.id: p.words for p in points})
        return upsert(points)

    def recording_set_vectors(words, dense):
        written.update(words)
        return set_vectors(words, dense)

    monkeypatch.setattr(index, "upsert", recording_upsert)
    monkeypatch.setattr(index, "set_vectors", recording_set_vectors)
    records = _chat(words_only, 90)
    live = dict(written)
    assert set(live) >= {r.id for r in records}
    index.delete([r.id for r in records])
    written.clear()
    monkeypatch.setattr(engram.keeper, "PAGE", 4)  # many pages a step, sharing its reads
    for shard in range(READ_SHARDS):
        assert engine.keeper.step("rebuild", BOT, "message", None, budget_s=600, shard=shard) is None
    assert index.count(Scope(bot=BOT)) == len(records)
    assert {i: written[i] for i in live} == live


@pytest.fixture(params=["embedder down", "embedder off"])
def words_only(service, request):
    """Words only: with the embedder down (meaning still mixed: a rebuild rewrites no neighbour's words,
    and mixes their meaning again) or off (no mixing: a rebuild reads lines for its own windows only and
    writes nothing around)."""
    if request.param == "embedder down":
        service.indexer.embedder.down = True
    else:
        service.indexer.embedder = NoEmbedder()
    return service
