"""A question's answer: what a thread message that asks something is answered with is the message after it,
by someone else — and that answer rarely repeats the question's words ("How often do you all work out?" —
"Three times a week, it keeps us on track."). A search that finds the question has found where the answer
is: the answer moves up by a share of the question's score (Retrieval.answer_weight).

Which message answers which is what a message already says: its context is the message before it in its
thread (its record's context_source, the point's `contextSource`), or it is a reply to it (Discord's reply,
its content's `replyTo`). Nothing is stored for it on its own, and a forget that clears a context or a reply
clears the link with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from .vectors import Hit

# What may follow a question's mark at the end of a message: a closing bracket or quote, an emoji, an
# attachment's description ("[image: …]") — anything but a word or another sentence's end
_TRAILING = re.compile(r"(?:\s*\[[^\[\]]*\])+\s*$")
_ASKS = re.compile(r"\?[^\w.!?]*$")


def asks(text: str) -> bool:
    """Whether a message ends by asking something ("…, how did it taste?", "Which one? 😅")."""
    return bool(_ASKS.search(_TRAILING.sub("", text)))


def questions_answered(hits: Sequence[Hit]) -> dict[int, Hit]:
    """Of these hits, the answers to questions among them: {an answer's id: the question it answers}. An
    answer's context is the question, or it replies to it (Discord's reply: its content's `replyTo`), and it
    is someone else's."""
    by_id, by_source = _questions(hits)
    if not by_id:
        return {}
    out = {}
    for hit in hits:
        context, replied = _asked_of(hit)
        question = by_id.get(context) if context is not None else None
        if question is None and replied is not None:
            question = by_source.get(replied)
        # a message after one's own question goes on asking, it does not answer it
        if question is not None and question.payload.get("user") != hit.payload.get("user"):
            out[hit.id] = question
    return out


def _questions(hits: Sequence[Hit]) -> tuple[dict[int, Hit], dict[str, Hit]]:
    """The hits that ask, by id and by source id."""
    questions = [h for h in hits if asks(str(h.payload.get("text", "")))]
    by_source = {str(h.payload["sourceId"]): h for h in questions if h.payload.get("sourceId")}
    return {h.id: h for h in questions}, by_source


def _asked_of(hit: Hit) -> tuple[int | None, str | None]:
    """What a message may answer: its context's memory id, and the source id of the message it replies to."""
    context = hit.payload.get("contextSource")
    content = hit.payload.get("content")
    reply = content.get("replyTo") if isinstance(content, dict) else None
    replied = reply.get("messageId") if isinstance(reply, dict) else None
    return (int(context) if isinstance(context, int | float) else None), (str(replied) if replied else None)


def with_answers(hits: Sequence[Hit], replies: Sequence[Hit]) -> list[Hit]:
    """The hits and, of `replies` (messages whose context may be one of them), the answers to the questions
    among them that are not hits yet, at score 0: an answer shares no word with what it answers as often as
    not, and a scan of the records by words would not reach it (engram.reads, Qdrant down)."""
    have = {h.id for h in hits}
    sources = {str(h.payload["sourceId"]) for h in hits if h.payload.get("sourceId")}
    more = [h for h in replies if h.id not in have and _answers_one_of(h, have, sources)]
    answered = questions_answered([*hits, *more]) if more else {}
    return [*hits, *(h for h in more if h.id in answered)]


def _answers_one_of(hit: Hit, ids: set[int], sources: set[str]) -> bool:
    context, replied = _asked_of(hit)
    return context in ids or replied in sources


def lift_answers(hits: Sequence[Hit], answered: Mapping[int, Hit], weight: float) -> list[Hit]:
    """The hits, each answer (`answered`: questions_answered) moved up by `weight` times its question's score
    (0: nothing moves)."""
    if not weight or not answered:
        return list(hits)
    moved = [
        replace(h, score=h.score + weight * answered[h.id].score) if h.id in answered else h for h in hits
    ]
    # a stable sort: hits of equal score keep the order the search settled for them
    return sorted(moved, key=lambda h: -h.score)
