"""A chat message's context: the words of the message before it in its thread (the message it answers), whose
they are and which record holds them. It is what a message's window and a question's answer are found by
(engram.replies), what a nickname is learned from (engram.names), and what a forget clears."""

from __future__ import annotations

from .domain import MAX_CONTEXT_CHARS, ChatMessage
from .ports import ClaimsPort, StatePort, ThreadTailsPort
from .store import source_key

# a record's context: the words, whose they are, and which record they are from
Context = tuple[str | None, str | None, int | None]
NO_CONTEXT: Context = (None, None, None)


def thread_contexts(
    tails: ThreadTailsPort,
    bot: str,
    messages: list[ChatMessage],
    ids: list[int],
    stamp: int,
    stored_tails: bool = True,
) -> list[Context]:
    """Each message's conversation context — the text of the message before it in its thread (earlier in the
    batch by time, else the newest one stored; `stored_tails=False`: the batch's alone) — with whose words it
    is and which record (`ids`: the messages' record ids; `stamp`: the time of those without one)."""
    threads = [m.thread for m in messages if m.thread] if stored_tails else []
    newest = {t: (d.text, d.user, d.id) for t, d in tails.of(bot, threads).items()} if threads else {}
    order = sorted(range(len(messages)), key=lambda i: (messages[i].created_at or stamp, i))
    contexts: list[Context] = [NO_CONTEXT] * len(messages)
    for i in order:
        m = messages[i]
        if not m.thread:
            continue
        text, author, source = newest.get(m.thread) or NO_CONTEXT
        contexts[i] = (text[:MAX_CONTEXT_CHARS], author, source) if text else NO_CONTEXT
        if m.text.strip() and m.expires_at is None:
            newest[m.thread] = (m.text, m.user, ids[i])
    return contexts


def linked(given: Context, in_thread: Context) -> Context:
    """A context given with a message (an import's line) and the record it is from: the one it names, else
    its thread's message before it when that is the same text by the same author (an export's lines carry a
    context's words and author, not its record; a question's answer is found by the link: engram.replies)."""
    text, author, source = given
    if source is None and text and in_thread[0] == text[:MAX_CONTEXT_CHARS] and in_thread[1] == author:
        return text, author, in_thread[2]
    return given


def unnamed_replies(state: StatePort, claims: ClaimsPort, bot: str, messages: list[ChatMessage]) -> None:
    """A reply to a message of someone forgotten keeps no trace of them (content.replyTo: their id and
    their message's), unless the message it answers is stored here (written after they came back)."""
    replies = {
        id(m): (str(r.get("messageId") or ""), str(r.get("authorId") or ""))
        for m in messages
        if isinstance(m.content, dict) and isinstance(r := m.content.get("replyTo"), dict)
    }
    gone = state.tombstones.when(bot, {author for _, author in replies.values() if author})
    if not gone:
        return
    answered = [message for message, author in replies.values() if author in gone and message]
    stored = claims.find_uniques(bot, [source_key(m) for m in answered]) if answered else {}
    for m in messages:
        message, author = replies.get(id(m), ("", ""))
        if author in gone and source_key(message) not in stored:
            m.content = {k: v for k, v in m.content.items() if k != "replyTo"}
