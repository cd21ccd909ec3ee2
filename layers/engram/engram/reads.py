"""Reading memories: one, newest first, by words and meaning (one embed, one vector query), and the
words scan of the records when the index is down."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .bookkeeping import ForgetUnderWay
from .clock import now_ms
from .domain import (
    FALLBACK_READ,
    FALLBACK_SCAN,
    Found,
    Memory,
    check_limit,
    check_min_score,
    check_name,
    matches_metadata,
    required_name,
)
from .errors import IndexUnavailable, InvalidInput, NotFound
from .indexing import Indexer
from .names import asked_names, favour, in_first_person, labelled
from .observability import timed
from .parts import MemoryParts
from .record import Listing, drew_on
from .relevance import QUERIES, STATEMENTS, Calibration, calibrate, combined, words_share
from .replies import lift_answers, questions_answered, with_answers
from .retrieval import Retrieval, feedback_query, feedback_vector
from .shapes import payload
from .store import KINDS, Record, source_key
from .text import check_text, format_memory_id
from .vectors import Hit, Query, Scope, ranked
from .when import NamedDays, favour_dated, on_days, read_days
from .words import SparseVector, terms

log = logging.getLogger(__name__)

# a question's meaning: the model's vector name and the question's vector (None: words alone)
QueryMeaning = tuple[str, list[float]] | None
# How many pages a listing reads on when a forget under way hid rows of the first
LIST_ROUNDS = 5
# ... and how many records a listing filtered by metadata reads at most for one page (it says where it
# stopped: the caller pages on from there)
FILTERED_READ = 5_000


class Hidden:
    """What no read shows: memories whose expiry has come (by `now`), and of the users whose forget is under
    way ({user: forget time}) what they wrote and what quotes them; the test of a record or hit."""

    def __init__(self, under_way: Mapping[str, ForgetUnderWay], now: int) -> None:
        self.users = {user: at for user, (at, _) in under_way.items()}
        self.now = now

    def record(self, r: Record) -> bool:
        """An expired record, a record of theirs received before the forget, one whose context quotes them,
        or an answer made from their words (its drewOn names them)."""
        if r.expired(self.now):
            return True
        if not self.users:
            return False
        mine = r.user in self.users and r.arrived <= self.users[r.user]
        quoted = bool(r.context and r.context_author in self.users)
        return mine or quoted or any(u in self.users for u in drew_on(r))

    def hit(self, hit: Hit) -> bool:
        """A point of theirs, one whose context quotes them, or an answer drawn on their words (its payload
        says whose words it holds)."""
        expires = hit.payload.get("expiresAt")
        if expires is not None and int(expires) <= self.now:
            return True
        if not self.users:
            return False
        payload = hit.payload
        content = payload.get("content")
        drew = content.get("drewOn") if isinstance(content, dict) else None
        return (
            payload.get("user") in self.users
            or payload.get("contextUser") in self.users
            or (isinstance(drew, list) and any(str(u) in self.users for u in drew))
        )


class MemoryReads:
    """The read half of the memory service: one memory, newest first, and search by words and meaning."""

    def __init__(self, parts: MemoryParts, indexer: Indexer) -> None:
        self.records, self.state, self.index = parts.records, parts.state, parts.index
        self.queue, self.words = parts.queue, parts.words
        self.indexer = indexer
        self.calibrations: dict[str, Calibration] = {}  # per named vector: its model's cosine levels

    @property
    def retrieval(self) -> Retrieval:
        """How retrieval is tuned for the current model (the indexer's: it holds the model)."""
        return self.indexer.retrieval

    # ----- forgets under way: hidden from every read until they finish ----------------------------------

    def hider(self, bot: str | None) -> Hidden:
        """What a read of this bot must not show: the records of users whose forget is under way (received
        before it), and records whose context quotes them. One small strongly consistent query per read."""
        return Hidden(self.state.tombstones.under_way(bot) if bot else {}, now_ms())

    @property
    def dense_name(self) -> str | None:
        """The named vector of the current embedding model, or None when vectors are off."""
        return self.indexer.dense_name

    def bots(self) -> list[str]:
        """Every bot that has memories (or had: a bot is registered at its first write)."""
        return sorted(self.records.bots())

    def by_source(self, bot: str, source_id: str) -> Memory | None:
        """The chat message stored under a source message id (a Discord message id), or None."""
        record = self.records.claims.find_unique(bot, source_key(source_id))
        if record is None or self.hider(bot).record(record):
            return None
        return Memory.from_record(record)

    def by_sources(self, bot: str, source_ids: list[str]) -> dict[str, Memory]:
        """The chat messages stored under these source message ids, by source id (those not stored are
        left out)."""
        keys = {source_key(s): s for s in source_ids}
        found = self.records.claims.find_uniques(bot, list(keys)) if keys else {}
        records = self.records.batch_get(bot, list(found.values())) if found else {}
        hidden = self.hider(bot)
        return {
            keys[key]: Memory.from_record(records[i])
            for key, i in found.items()
            if i in records and not hidden.record(records[i])
        }

    def get(self, bot: str, memory_id: int) -> Memory:
        """One memory, or NotFound."""
        record = self.records.get(bot, memory_id)
        if record is None or self.hider(bot).record(record):
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        return Memory.from_record(record)

    def list(
        self,
        bot: str,
        kind: str = "fact",
        limit: int | None = None,
        *,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
        before: int | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Found:
        """Newest first; `before` (a memory id) pages on: only memories older than it; `metadata`: only
        those with every one of these values (reading at most FILTERED_READ records: `read_to` says where
        a page that stopped there ends)."""
        bot, kind, limit = required_name("bot", bot), self._kind(kind), check_limit(limit)
        server, project, user = (
            check_name("serverId", server),
            check_name("project", project),
            check_name("userId", user),
        )
        hidden = self.hider(bot)
        if user is not None and user in hidden.users:
            return Found()
        return self._page(bot, kind, limit, Listing(server, project, user, before), hidden, metadata or {})

    def _page(
        self, bot: str, kind: str, limit: int, listing: Listing, hidden: Hidden, wanted: dict[str, str]
    ) -> Found:
        """A listing's page: newest first, what is hidden or lacks the wanted metadata left out."""
        out, before = Found(), listing.before
        server, project, user = listing.server, listing.project, listing.user
        # A page that hid some rows reads on, so a forget under way (or an expiry) never ends it early
        rounds, read = (FILTERED_READ // limit + 1, 0) if wanted else (LIST_ROUNDS, 0)
        for _ in range(rounds):
            rows = self.records.newest(bot, kind, limit, Listing(server, project, user, before))
            read += len(rows)
            shown = [r for r in rows if not hidden.record(r) and matches_metadata(r.metadata, wanted)]
            out.extend(Memory.from_record(r) for r in shown[: limit - len(out)])
            if len(rows) < limit or len(out) >= limit or len(shown) == len(rows):
                break
            before = int(rows[-1].id)
            if wanted and read >= FILTERED_READ:
                out.read_to = before
                break
        return out

    def search(  # noqa: PLR0913 - the Memory API's search, one keyword a query parameter
        self,
        bot: str,
        query: str,
        kind: str = "fact",
        limit: int | None = None,
        *,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
        metadata: dict[str, str] | None = None,
        min_score: float | None = None,
        asker: str | None = None,
    ) -> Found:
        """Best first, by words and (with vectors on) by meaning; words alone when the embedder is down
        or still loading. `metadata`: only memories with every one of these values; `min_score`: only
        memories at least this relevant (engram.relevance); `asker`: the user asking, whose memories a
        question about themselves ("my", "I") favours (engram.names)."""
        scope = Scope(
            bot=required_name("bot", bot),
            kind=self._kind(kind),
            server=check_name("serverId", server),
            project=check_name("project", project),
            user=check_name("userId", user),
            metadata=tuple(sorted((metadata or {}).items())),
        )
        asker = check_name("askedBy", asker)
        return self.recall(scope, query, check_limit(limit), check_min_score(min_score), asker=asker)

    def recall(
        self, scope: Scope, query: str, k: int, min_score: float = 0.0, asker: str | None = None
    ) -> Found:
        """The top-k memories of a scope for a query: one embed, one vector query; each scored by how
        relevant it is (engram.relevance), and those under `min_score` left out. A search never waits for a
        model to load: until it is warm, words alone answer (`Found.meaning` says which). `asker`: who asks,
        whose memories a question about itself ("what did I say") favours (engram.names)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query is empty")
        check_text("query", query)
        found = self._recall(scope, query, k, asker)
        kept = Found(m for m in found if (m.score or 0.0) >= min_score)
        kept.meaning = found.meaning
        return kept

    def _recall(self, scope: Scope, query: str, k: int, asker: str | None) -> Found:
        scope = replace(scope, alive_at=now_ms())  # what expired is not among the top k
        words, days = self.words.query(query), self._days(query, scope)
        try:
            meaning = self._meaning(self._as_they_say_it(scope, query, words))
            # an index with no vector of the model yet (nothing written since it was chosen) is asked by
            # words, while the answer says meaning is on: the question was embedded, nothing means it yet
            dense = meaning if meaning is not None and self.indexer.dense_exists(meaning[0]) else None
            # a model whose cosines are centred (engram.relevance) is scored from the hits' vectors
            levels = self._calibration() if dense is not None else None
            with timed("vector-query"):
                hits = self._ranked(scope, words, dense, k, days.spans, bool(levels and levels.centred))
            # what a forget under way hides names no one, answers nothing and takes no place in the top k
            hidden = self.hider(scope.bot)
            hits = [h for h in hits if not hidden.hit(h)]
            named = asked_names(hits, query, asker) if self.retrieval.name_weight else {}
            hits = favour(hits, named, self.retrieval.name_weight)
            answered = questions_answered(hits) if self.retrieval.answer_weight else {}
            hits = lift_answers(hits, answered, self.retrieval.answer_weight)[:k]
            # (the index ranks equal scores by id: the same question, the same answer)
        except IndexUnavailable as exc:
            self.indexer.failed(exc.message)
            log.warning("index unavailable, searching records by words: %s", exc.message)
            return self._words_fallback(scope, query, k, asker)
        beside = Asked.of(days, named, scope, answered)
        found = self._scored(hits, query, dense, levels, beside)
        found.meaning = meaning is not None
        return found

    def _as_they_say_it(self, scope: Scope, query: str, words: SparseVector) -> str:
        """The text a question's meaning is asked by: as the authors it names speak of themselves ("what did
        Melanie paint?" as "what did I paint?": engram.names.in_first_person, Retrieval.name_in_first_person),
        or as it is. Who it names is read from its words' hits (their authors' names are in their words), a
        search of the words leg alone before the one embed."""
        settings = self.retrieval
        if not (settings.name_in_first_person and settings.name_weight and words.indices and self._vectors()):
            return query
        by_words = Query(words, None, settings.name_depth, settings.fusion(len(words.indices)))
        return in_first_person(query, asked_names(self.index.search(scope, by_words), query)) or query

    def _vectors(self) -> bool:
        """Whether a search can ask by meaning: vectors on, and the index holding them."""
        return self.dense_name is not None and self.indexer.dense_exists(self.dense_name)

    def _meaning(self, text: str) -> QueryMeaning:
        """What a question means, as the index's vectors (None: vectors off, or the model down or still
        loading)."""
        vectors = self.indexer.embed([text], wait=False, query=True) if self.dense_name is not None else None
        return (self.dense_name, vectors[0]) if vectors and self.dense_name else None

    def _days(self, query: str, scope: Scope) -> NamedDays:
        """The days a question names, counted from the moment of the search (none with days weighed 0)."""
        return read_days(query, scope.alive_at or now_ms()) if self.retrieval.date_weight else NamedDays()

    def _ranked(
        self,
        scope: Scope,
        words: SparseVector,
        dense: QueryMeaning,
        k: int,
        spans: tuple[tuple[int, int], ...],
        vectors: bool = False,
    ) -> Sequence[Hit]:
        """The index's hits for a question, deep enough for names to move (engram.names): asked once, again
        with what its best hits agree on (feedback), and of the days it names (`spans`: engram.when); with
        their vectors when `vectors`."""
        settings = self.retrieval
        fusion = settings.fusion(len(words.indices))
        moving = bool(settings.feedback_docs and settings.feedback_dense and dense)
        # names are read from the hits: a named author's memories below the k-th can move up (and answers)
        depth = max(k, settings.name_depth) if settings.name_weight or settings.answer_weight else k
        first = Query(
            words, dense, max(depth, settings.feedback_min_hits), fusion, with_vector=moving or vectors
        )
        hits = self.index.search(scope, first)
        # a hit's relevance is its cosine with the query asked, not with the one feedback moves
        cosines = {h.id: h.cosine for h in hits}
        # Feedback needs a crowd: in a handful of memories the top three are most of the scope
        if settings.feedback_docs and len(hits) >= settings.feedback_min_hits:
            # Pseudo-relevance feedback: what the best hits agree on, asked again (no new embed)
            more_words = feedback_query(words, hits, settings) if words.indices else None
            more_dense = feedback_vector(dense, hits, settings)
            if more_words is not None or more_dense is not None:
                again = Query(more_words or words, more_dense or dense, depth, fusion, with_vector=vectors)
                hits = [
                    replace(h, cosine=cosines.get(h.id, h.cosine) if more_dense else h.cosine)
                    for h in self.index.search(scope, again)
                ]
        if spans:  # those days' memories, which the search may not reach: one query more
            asked = Query(words, dense, depth, fusion, with_vector=vectors)
            dated = self.index.search(replace(scope, created=spans), asked)
            hits = favour_dated(hits, dated, spans, settings.date_weight, fusion.k)
        return hits

    def _scored(
        self,
        hits: Sequence[Hit],
        query: str,
        dense: QueryMeaning,
        levels: Calibration | None,
        beside: Asked,
    ) -> Found:
        """The hits as memories, each scored by how relevant it is: its cosine with the query on the model's
        scale (`levels`; None: words alone) and the share of the query's words it has (engram.relevance),
        its text's and those it has `beside` it."""
        asked = set(terms(query))

        def relevance(hit: Hit) -> float:
            by_meaning = levels.meaning(_cosine(levels, hit, dense)) if levels else 0.0
            text = str(hit.payload.get("text", ""))
            return combined(by_meaning, words_share(asked, text, beside.words_of(hit)))

        found = Found()
        for hit in hits:
            memory = Memory.from_hit(hit)
            memory.score = relevance(hit)
            if (question := beside.questions.get(hit.id)) is not None:
                # an answer is as relevant as the question it answers where that is more ("Three times a
                # week." to "how often do you work out?")
                memory.score = max(memory.score, relevance(question))
            found.append(memory)
        return found

    def _calibration(self) -> Calibration | None:
        """The current model's cosine levels, measured once per process on the reference pairs (None while
        the model cannot embed them: relevance is then by words alone)."""
        name = self.dense_name
        if name is None:
            return None
        if name not in self.calibrations:
            queries = self.indexer.embed(list(QUERIES), wait=False, query=True)
            statements = self.indexer.embed(list(STATEMENTS), wait=False)
            if not queries or not statements:
                return None
            self.calibrations[name] = calibrate(queries, statements)
            log.info(
                "relevance levels of %s: unrelated %.3f, related %.3f%s",
                name,
                self.calibrations[name].unrelated,
                self.calibrations[name].related,
                " (centred cosines)" if self.calibrations[name].centred else "",
            )
        return self.calibrations.get(name)

    def similar(self, scope: Scope, text: str, content: Any = None) -> tuple[Memory, float] | None:
        """The memory closest in meaning to a text and its cosine similarity (None without vectors). The
        text is embedded as a memory of the scope's user with this `content` would be (labelled with their
        name: Retrieval.author_label), so the same words score as the same memory."""
        name = self.dense_name
        if name is None or not self.indexer.dense_exists(name):
            return None
        if self.retrieval.author_label:
            text = labelled(text, scope.user, content)
        vectors = self.indexer.embed([text])
        if not vectors:
            return None
        hidden, levels = self.hider(scope.bot), self._calibration()
        centred = levels is not None and levels.centred
        asked = Query(None, (name, vectors[0]), 4, self.retrieval.fusion(0), with_vector=centred)
        hits = [h for h in self.index.search(scope, asked) if not hidden.hit(h)]
        return _closest(hits, vectors[0], levels if centred else None)

    def _words_fallback(self, scope: Scope, query: str, k: int, asker: str | None = None) -> Found:
        listing = Listing(scope.server, scope.project, scope.user, read_at_most=FALLBACK_READ)
        rows = self.records.newest(
            required_name("bot", scope.bot), scope.kind or "fact", FALLBACK_SCAN, listing
        )
        hidden, wanted = self.hider(scope.bot), dict(scope.metadata)
        shown = [r for r in rows if not hidden.record(r) and matches_metadata(r.metadata, wanted)]
        by_id = {int(r.id): r for r in shown}
        scored, beside = self._by_words(shown, scope, query, asker)
        asked, out = set(terms(query)), Found()
        for hit in scored[:k]:
            r = by_id[hit.id]
            memory = Memory.from_record(r)
            memory.score = words_share(asked, r.text, beside.words_of(hit))  # relevance by words alone
            if (question := beside.questions.get(hit.id)) is not None:  # (as _scored)
                said = str(question.payload.get("text", ""))
                memory.score = max(memory.score, words_share(asked, said, beside.words_of(question)))
            out.append(memory)
        return out

    def _by_words(
        self, shown: Sequence[Record], scope: Scope, query: str, asker: str | None
    ) -> tuple[Sequence[Hit], Asked]:
        """Records ranked by the words the index holds for them (their author's names too), the days and the
        authors a question names favoured, as a search of the index would: the same question finds the
        same memories with Qdrant down. With what the question asks beside its words."""
        q = self.words.query(query)
        scored = [
            Hit(int(r.id), score, payload(r))
            for r in shown
            if (score := self.words.score(q, self.indexer.words_of(r))) > 0
        ]
        if self.retrieval.answer_weight:  # answers to the questions found (the index has them by windows)
            scored = with_answers(scored, [Hit(int(r.id), 0.0, payload(r)) for r in shown])
        days = self._days(query, scope)
        dated = [Hit(int(r.id), 0.0, payload(r)) for r in shown if on_days(r.created_at, days.spans)]
        fusion_k = self.retrieval.fusion(len(q.indices)).k
        scored = favour_dated(ranked(scored), dated, days.spans, self.retrieval.date_weight, fusion_k)
        named = asked_names(scored, query, asker) if self.retrieval.name_weight else {}
        scored = favour(scored, named, self.retrieval.name_weight)
        answered = questions_answered(scored) if self.retrieval.answer_weight else {}
        moved = lift_answers(scored, answered, self.retrieval.answer_weight)
        return moved, Asked.of(days, named, scope, answered)

    @staticmethod
    def _kind(kind: str | None) -> str:
        if kind not in KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}")
        return kind


@dataclass(frozen=True)
class Asked:
    """What a question asks beside its words' meaning, which a memory has beside its text: the days it
    names ("yesterday": engram.when) and the authors (each with the terms naming them: engram.names). "What
    did we decide yesterday?" is half answered by any memory of yesterday, "what is Mel planning?" by any
    of Mel's, so a floor (minScore) keeps them where their text shares no other word of the question."""

    spans: tuple[tuple[int, int], ...] = ()
    day_terms: tuple[str, ...] = ()
    name_terms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the answers among the hits, each with the question it answers (engram.replies), by the answer's id
    questions: Mapping[int, Hit] = field(default_factory=dict)

    @staticmethod
    def of(
        days: NamedDays, named: Mapping[str, str], scope: Scope, answered: Mapping[int, Hit] | None = None
    ) -> Asked:
        """What a search of this scope asks beside its words, as terms (made once, not per hit): in one
        person's memories (a scope with a user: LibreChat's, a search with `userId`) a name tells no memory
        from another: it counts for none. `answered`: the answers among the hits, each with its question."""
        names = {user: tuple(terms(words)) for user, words in named.items()} if scope.user is None else {}
        return Asked(days.spans, tuple(terms(days.words)), names, answered or {})

    def words_of(self, hit: Hit) -> tuple[str, ...]:
        """The question's terms this hit has beside its text."""
        named = self.name_terms.get(hit.payload.get("user") or "", ())
        return (*named, *self.day_terms) if on_days(hit.payload.get("createdAt"), self.spans) else named


def _cosine(levels: Calibration, hit: Hit, dense: QueryMeaning) -> float | None:
    """The cosine a hit's relevance is judged by: the meaning leg's own, or, for a model whose levels are of
    centred cosines, one taken of the query's and the hit's vectors (None: not among the meaning leg's
    candidates, or no vector came back)."""
    if hit.cosine is None or not levels.centred:
        return hit.cosine
    if dense is None or not hit.vector:
        return None
    return levels.cosine_of(dense[1], hit.vector)


def _closest(
    hits: Sequence[Hit], vector: Sequence[float], levels: Calibration | None
) -> tuple[Memory, float] | None:
    """The hit closest to a memory's vector and how close: the index's first and its cosine, or, for a
    model whose vectors share one direction (`levels` centred), the closest less the memories' mean."""
    if levels is None:
        return (Memory.from_hit(hits[0]), hits[0].score) if hits else None
    scored = [(levels.between_memories(vector, h.vector), h) for h in hits if h.vector]
    if not scored:
        return None
    closeness, best = max(scored, key=lambda pair: pair[0])
    return Memory.from_hit(best), closeness
