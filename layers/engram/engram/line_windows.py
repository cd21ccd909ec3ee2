"""Windows: the turns around a record on its line (its thread, or a fact's author and scope), whose words
are a field of its point and whose own vectors its searched meaning is mixed with. Written with the record,
rewritten around one that changes or leaves, mixed again by a re-embed's second pass."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .embedders import own_vector_name
from .errors import IndexUnavailable
from .line_spans import LineReader, line_around
from .names import author_words, indexed_text
from .parts import MemoryParts
from .retrieval import Retrieval, date_words
from .store import Record
from .words import SparseVector

# How many records each side a window may hold where a thread's turns count by author: a line is read
# twice as far, so this bounds what a write reads however many messages in a row its people send
MOST_WINDOW_RECORDS = 6


def mix_meaning(own: list[float], context: list[float], weight: float) -> list[float]:
    """own + weight * context, back to unit length."""
    mixed = [a + weight * b for a, b in zip(own, context, strict=False)]
    norm = math.sqrt(sum(x * x for x in mixed)) or 1.0
    return [x / norm for x in mixed]


def mean_of(vectors: list[list[float]]) -> list[float]:
    """The mean of vectors, at unit length."""
    mean = [sum(xs) / len(vectors) for xs in zip(*vectors, strict=True)]
    norm = math.sqrt(sum(x * x for x in mean)) or 1.0
    return [x / norm for x in mean]


@dataclass
class _Held:
    """What the index holds of the records around a write: which points exist, their own vectors (and the
    write's own just embedded), and which of them held no own vector beside the searched one yet."""

    owns: dict[int, list[float]] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)
    unkept: set[int] = field(default_factory=set)

    def know(self, written: list[Record], own: dict[int, list[float]]) -> None:
        """A write's own vectors just embedded replace what the index held for its points; a written record
        without one (the embedder down) counts as having none: the vector its point held was made of what
        it said before (a cleared context, a changed text), and is mixed into no window."""
        for r in written:
            self.owns.pop(int(r.id), None)
            self.unkept.discard(int(r.id))
        self.owns.update(own)


def _order(r: Record) -> tuple[int, int]:
    return int(r.created_at), int(r.id)


def _turns(side: Sequence[Record], author: str | None, turns: int) -> list[Record]:
    """The messages of a thread's side, nearest first, over `turns` changes of author (the messages of the
    record's own author next to it are its own turn)."""
    out: list[Record] = []
    for r in side:
        if r.user is None or r.user != author:
            turns -= 1
            author = r.user
        if turns < 0:
            break
        out.append(r)
    return out


class LineWindows:
    """The windows of records, read along their lines; the meaning and words of the points around them."""

    def __init__(
        self,
        parts: MemoryParts,
        retrieval: Callable[[], Retrieval],
        dense: Callable[[], str | None],
        dense_exists: Callable[[str], bool],
    ) -> None:
        self._records, self._state, self._index = parts.records, parts.state, parts.index
        self._retrieval, self._words = retrieval, parts.words
        # the retrieval settings, the current model's vector name and whether the index has a vector, read
        # from the indexer at each use: its embedder (and, in tests and the bench, its settings) can change
        self._dense, self._dense_exists = dense, dense_exists

    @property
    def window_turns(self) -> int:
        """How many records each side a window may hold (0: windows are off): `window_turns`, or where a
        thread's turns count by author (Retrieval.window_by_author) up to MOST_WINDOW_RECORDS."""
        settings = self._retrieval()
        if not (settings.words_window or self.mixing):
            return 0
        if settings.window_by_author and settings.window_turns:
            return max(settings.window_turns, MOST_WINDOW_RECORDS)
        return settings.window_turns

    @property
    def mixing(self) -> bool:
        """Whether a point's searched meaning is mixed with its window's (its own is kept beside it)."""
        return bool(self._retrieval().meaning_window) and self._dense() is not None

    def lines(
        self,
        records: list[Record],
        removed: bool = False,
        reads: LineReader | None = None,
        own_windows_only: bool = False,
        beside: Sequence[Record] = (),
    ) -> dict[str, list[Record]]:
        """The lines of these records, reaching far enough for their neighbours' windows too (with
        `own_windows_only`, for their own), without the records of users forgotten since they arrived (a
        window never brings back a forgotten person's words); `removed`: these records are leaving, and
        are left out even where the index still lists them; `reads`: a maintenance step's line reads,
        shared by its pages; `beside`: records it read a moment ago, not read again."""
        reach = self.window_turns if own_windows_only else 2 * self.window_turns
        lines = line_around(self._records, records, reach, reads, beside)
        users = {r.user for line in lines.values() for r in line if r.user}
        gone = self._state.tombstones.when(records[0].bot, users) if users else {}
        leaving = {int(r.id) for r in records} if removed else set()
        out = {
            name: [
                r
                for r in line
                if int(r.id) not in leaving and not (r.user in gone and gone[r.user] >= r.arrived)
            ]
            for name, line in lines.items()
        }
        if not removed:  # a record written a moment ago may not be in the (eventually consistent) index yet
            for r in records:
                held = out.get(r.line or "")
                if held is not None and all(int(x.id) != int(r.id) for x in held):
                    held.append(r)
                    held.sort(key=_order)
        return out

    def forgotten_since(self, lines: dict[str, list[Record]]) -> bool:
        """Whether someone with a record in these lines (read a moment ago, the forgotten left out) has been
        forgotten since: their tombstone is written before their forget rewrites the windows."""
        everyone = [r for line in lines.values() for r in line if r.user]
        if not everyone:
            return False
        gone = self._state.tombstones.when(everyone[0].bot, {r.user for r in everyone if r.user})
        return any(r.user in gone and gone[r.user] >= r.arrived for r in everyone)

    def _around(self, line: list[Record], at: int) -> list[Record]:
        least, reach = self._retrieval().window_turns, self.window_turns
        before, after = line[max(0, at - reach) : at][::-1], line[at + 1 : at + 1 + reach]
        if reach == least or line[at].kind != "message":
            return before[:least][::-1] + after[:least]
        # a thread's window counts turns by author: one's several messages in a row are one turn
        author = line[at].user
        return _turns(before, author, least)[::-1] + _turns(after, author, least)

    def _holds(self, line: list[Record], n: int, at: int) -> bool:
        """Whether line[n]'s window (or itself) holds line[at]: a record read farther than a window of
        fixed turns reaches may not be in it."""
        return n == at or any(int(x.id) == int(line[at].id) for x in self._around(line, n))

    def _window(self, line: list[Record], at: int) -> str | None:
        if not self._retrieval().words_window:
            return None
        labels = self._retrieval().author_label
        return " ".join(indexed_text(r, labels) for r in self._around(line, at))

    def _meaning(self, line: list[Record], at: int, owns: dict[int, list[float]]) -> list[float] | None:
        """The searched meaning of `line[at]`: its own vector moved towards the mean of its window's own
        vectors (None: it has no vector yet)."""
        own = owns.get(int(line[at].id))
        if own is None:
            return None
        around = [owns[int(r.id)] for r in self._around(line, at) if int(r.id) in owns]
        return mix_meaning(own, mean_of(around), self._retrieval().meaning_window) if around else own

    def held(self, lines: dict[str, list[Record]], known: dict[int, list[float]]) -> _Held:
        """What the index holds of the records in these lines, in one read: which points exist and (mixing)
        their own vectors, beside the `known` ones just embedded. A point from before mixing has only its
        searched vector, which is its own then (it is written back beside the mixed one)."""
        held = _Held(owns=dict(known))
        wanted = sorted({int(r.id) for line in lines.values() for r in line if int(r.id) not in known})
        if not wanted:
            return held
        name = self._dense()
        own_name = own_vector_name(name) if name is not None else ""
        # asking for a vector the index lacks fails
        names = [n for n in (own_name, name) if n and self.mixing and self._dense_exists(n)]
        for memory_id, named in self._index.dense_of(names, wanted).items():
            held.live.add(memory_id)
            if own_name in named:
                held.owns[memory_id] = named[own_name]
            elif name in named:
                held.owns[memory_id] = named[name]
                held.unkept.add(memory_id)
        return held

    def read_around(
        self, records: list[Record], reads: LineReader | None = None, own_windows_only: bool = False
    ) -> tuple[dict[str, list[Record]], _Held]:
        """A write's lines and what the index holds of them: read while its text is embedded."""
        lines = self.lines(records, reads=reads, own_windows_only=own_windows_only)
        return lines, self.held(lines, {})

    def windows(self, records: list[Record], lines: dict[str, list[Record]]) -> dict[int, str]:
        """Each record's window as one text: the turns around it in its line."""
        out = {}
        for r in records:
            line = lines.get(r.line or "", [])
            at = next((n for n, x in enumerate(line) if int(x.id) == int(r.id)), None)
            text = self._window(line, at) if at is not None else None
            if text is not None:
                out[int(r.id)] = text
        return out

    def rewindow(self, records: list[Record], removed: bool = False, with_self: bool = False) -> int:
        """The records around these ones (changed, or `removed`; and these, `with_self`) get their windows
        again: their words are rewritten, and their meaning mixed again from the vectors they hold (no new
        embed). Returns how many points were rewritten."""
        if not self.window_turns or not records:
            return 0
        return self.rewrite_around(records, self.lines(records, removed), with_self=with_self)

    def mix_own(
        self, records: list[Record], reads: LineReader | None = None, beside: Sequence[Record] = ()
    ) -> int:
        """A re-embed's second pass: each of these records' searched meaning mixed again from its window's
        own vectors, which the first pass wrote for every record; the points around are mixed by their own
        pages, so each point is written once (the first pass used to mix every neighbour again as each of
        its window's vectors arrived: ~2 x turns + 1 writes a point). `beside`: the pages before and after
        these, which hold most of their windows (only the words' order and authors are read of them: the
        vectors come from the index). Returns how many were written."""
        if not self.mixing or not records:
            return 0
        lines = self.lines(records, reads=reads, own_windows_only=True, beside=beside)
        held = self.held(lines, {})
        wanted = {int(r.id) for r in records}
        mine = {
            int(r.id): (line, n)
            for line in lines.values()
            for n, r in enumerate(line)
            if int(r.id) in wanted and int(r.id) in held.live
        }
        self.update_points({}, self._remixed(mine, held))
        return len(mine)

    def rewrite_around(
        self,
        records: list[Record],
        lines: dict[str, list[Record]],
        held: _Held | None = None,
        with_words: bool = True,
        with_self: bool = False,
    ) -> int:
        around = self._neighbourhood(records, lines, with_self)
        if not around:
            return 0
        held = held or self.held(lines, {})
        # a neighbour still waiting for its point gets it whole
        live = {i: at for i, at in around.items() if i in held.live}
        words: dict[int, SparseVector] = {}
        if with_words:
            words = {i: self.words_of(line[n], self._window(line, n)) for i, (line, n) in live.items()}
        self.update_points(words, self._remixed(live, held))
        return len(live)

    def update_points(self, words: dict[int, SparseVector], dense: dict[str, dict[int, list[float]]]) -> None:
        """Replace vectors of existing points. A point deleted since it was read (a forget or a delete
        beside this write: Qdrant refuses the whole update) is left out, and the rest written."""
        try:
            self._index.set_vectors(words, dense)
        except IndexUnavailable:
            asked = set(words) | {i for vectors in dense.values() for i in vectors}
            live = self._index.existing(list(asked))
            if live == asked:
                raise
            self._index.set_vectors(
                {i: v for i, v in words.items() if i in live},
                {name: {i: v for i, v in vectors.items() if i in live} for name, vectors in dense.items()},
            )

    def _neighbourhood(
        self, records: list[Record], lines: dict[str, list[Record]], with_self: bool
    ) -> dict[int, tuple[list[Record], int]]:
        """The records within a window of these ones (and these, `with_self`), with their line and place."""
        turns = self.window_turns
        skip = set() if with_self else {int(r.id) for r in records}
        by_line: dict[str, list[Record]] = {}
        for r in records:
            by_line.setdefault(r.line or "", []).append(r)
        around: dict[int, tuple[list[Record], int]] = {}
        for line_name, written in by_line.items():
            line = lines.get(line_name)
            if not line:
                continue
            positions = {int(x.id): n for n, x in enumerate(line)}
            orders = [_order(x) for x in line]
            for r in written:  # a removed record is gone from its line: its place is where it would sort
                present = positions.get(int(r.id))
                at = present if present is not None else bisect.bisect_left(orders, _order(r))
                for n in range(max(0, at - turns), min(len(line), at + turns + 1)):
                    if int(line[n].id) in skip or (present is not None and not self._holds(line, n, at)):
                        continue
                    around[int(line[n].id)] = (line, n)
        return around

    def _remixed(
        self, around: dict[int, tuple[list[Record], int]], held: _Held
    ) -> dict[str, dict[int, list[float]]]:
        """The searched meaning of each of these points mixed again (mixing on), and the own vector of
        those that held none yet (a point from before mixing) written beside it."""
        name = self._dense()
        if not self.mixing or name is None or not around:
            return {}
        mixed: dict[int, list[float]] = {}
        for memory_id, (line, n) in around.items():
            vector = self._meaning(line, n, held.owns)
            if vector is not None:
                mixed[memory_id] = vector
        kept = {i: held.owns[i] for i in mixed if i in held.unkept}
        return {name: mixed, own_vector_name(name): kept} if kept else ({name: mixed} if mixed else {})

    def meanings(
        self, records: list[Record], lines: dict[str, list[Record]], held: _Held
    ) -> dict[int, dict[str, Any]]:
        """Each record's dense vectors as its point stores them: its own, and (mixing) the searched one
        mixed with its window's (`held.owns` holds the records' own vectors and their neighbours')."""
        name = self._dense()
        if name is None:
            return {}
        out: dict[int, dict[str, Any]] = {}
        for r in records:
            memory_id = int(r.id)
            own = held.owns.get(memory_id)
            if own is None:
                continue
            if not self.mixing:
                out[memory_id] = {name: own}
                continue
            line = lines.get(r.line or "", [])
            at = next((n for n, x in enumerate(line) if int(x.id) == memory_id), None)
            mixed = self._meaning(line, at, held.owns) if at is not None else None
            out[memory_id] = {name: mixed or own, own_vector_name(name): own}
        return out

    def words_of(self, r: Record, window: str | None) -> SparseVector:
        named = self._retrieval().author_label
        return self._words.document(
            r.text,
            author=author_words(r.user, r.content, r.text) if named else None,
            context=r.context,
            date=date_words(int(r.created_at)) if self._retrieval().date_terms else None,
            window=window,
        )
