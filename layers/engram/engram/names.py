"""People by the names they go by: which authors a question names, and favouring their memories.

A question about a person is answered by what that person said (on the LoCoMo dev five, 96 % of the
evidence of a question naming one speaker is that speaker's turns), but a chat message rarely carries its
author's name in its words, and people are named by more than one name: a Discord username, a display name,
a server nickname, what the others in the thread call them ("Hey Mel!"), a spelling of their own.

Nothing here is stored on its own: a memory's author names come from what its record already holds (its
user id when that is a name, the source's author names in its content, a speaker label its texts start
with), and a nickname from the turns that
address someone by it (the addressee is the author of the turn it answers: its context's author). So the
names are read from the hits of a search, and they go with the memories: a forget that deletes a person's
memories deletes every name engram knows them by, and no other store holds one.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .vectors import Hit
from .words import STOPWORDS

# The author names a source puts in a message's content: Discord's username, display name and server
# nickname (engram.discord.core.content_of), and the `name` / `authorName` an API caller may give.
CONTENT_NAMES = ("author", "displayName", "nick", "name", "authorName")

_LETTERS = re.compile(r"[^\W\d_]+")
# A pasted or exported chat line's speaker label ("Caroline: ..."): the words after it are the turn's own
_LABEL = re.compile(r"^\s*(?P<label>[^\W\d_][\w .'-]{0,40}):\s+")
# The ways a turn addresses someone by name: after a greeting or thanks at its start ("Hey Mel!", "Thanks,
# Jo."), or at its end after a comma ("See you soon, Mel!"). Only a capitalised word counts as a name.
_GREETING = (
    r"(?i:hey+|hi+|hello|hiya|yo|howdy|morning|good morning|evening|good evening|good night|night|"
    r"thanks|thank you|thx|ty|congrats|congratulations|wow|aw+|oh|ah|sorry|bye|welcome|dear|"
    r"happy birthday|cheers|love you|miss you)"
)
_NAME = r"(?P<name>[^\W\d_a-z][^\W\d_]+)"
_AT_START = re.compile(rf"^{_GREETING}[,!.]*\s+{_NAME}\b")
_AT_END = re.compile(rf",\s*{_NAME}\s*[!.?:)]*\s*$")
# Capitalised words a greeting is followed by that are not anyone's name
_NOT_NAMES = frozenset(
    (
        "all",
        "everyone",
        "everybody",
        "guys",
        "folks",
        "friend",
        "friends",
        "buddy",
        "dude",
        "man",
        "mate",
        "pal",
        "bro",
        "sis",
        "girl",
        "girls",
        "boys",
        "babe",
        "baby",
        "honey",
        "sweetie",
        "love",
        "dear",
        "there",
        "again",
        "so",
        "just",
        "much",
        "too",
        "mom",
        "mum",
        "dad",
        "sir",
        "madam",
        "team",
    )
)


def name_tokens(text: str) -> list[str]:
    """A name's (or a text's) words as names are compared: letters only, case and accents folded
    ("Zoë_99" -> ["zoe"])."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return [w for w in _LETTERS.findall(plain.casefold()) if len(w) >= 2]


# A name longer than this is not a person's name (LibreChat caps none; Discord's are 32 characters)
MAX_NAME_CHARS = 100


def user_name(user: Any) -> str | None:
    """A user id that is a name ("Caroline"); None for an id with digits (a Discord snowflake, LibreChat's
    database id), which names nobody."""
    if isinstance(user, str) and user.strip() and not any(c.isdigit() for c in user):
        return " ".join(user.split())[:MAX_NAME_CHARS]
    return None


def said_names(user: Any, content: Any, fields: Sequence[str] = CONTENT_NAMES) -> list[str]:
    """The names a memory's source gives its author, as written, in the order of `fields` then its user
    id (when that is a name): every reader of a memory's author names starts here."""
    said: list[str] = []
    if isinstance(content, Mapping):
        for field in fields:
            value = content.get(field)
            if isinstance(value, str) and value.strip():
                said.append(" ".join(value.split())[:MAX_NAME_CHARS])
    if (own := user_name(user)) is not None:
        said.append(own)
    return said


def names_of_author(user: Any, content: Any) -> set[str]:
    """The names a memory's author goes by, as names are compared (folded tokens)."""
    return {token for name in said_names(user, content) for token in name_tokens(name)} - STOPWORDS


def author_names(payload: Mapping[str, Any]) -> set[str]:
    """The names a hit's author goes by, from its payload (its user id and content)."""
    return names_of_author(payload.get("user"), payload.get("content"))


# The content names a memory is spoken by, the most personal first: a server nickname, a display name, a
# name the caller gave, a username
_SPOKEN = ("nick", "displayName", "name", "authorName", "author")


def spoken_name(user: str | None, content: Any) -> str | None:
    """The name a memory's author is shown by: the first of its content's names, else its user id when that
    is a name; None when neither is."""
    said = said_names(user, content, _SPOKEN)
    return said[0] if said else None


def carries_label(text: str, user: str | None, content: Any) -> bool:
    """Whether a text already starts with one of its author's names as a label (a pasted or exported chat
    line, "Caroline: …"): then its words and meaning name the author already, and the index adds neither
    the label nor the names again. A text opening "Update: …" does not."""
    label = _LABEL.match(text)
    return label is not None and bool(set(name_tokens(label.group("label"))) & names_of_author(user, content))


def labelled(text: str, user: str | None, content: Any) -> str:
    """A memory's text as its meaning is embedded: "Name: text", unless its author has no name or the
    text carries their label already."""
    name = spoken_name(user, content)
    if not name or not text or carries_label(text, user, content):
        return text
    return f"{name}: {text}"


def author_words(user: str | None, content: Any, text: str = "") -> str | None:
    """Every name a memory's source gives its author, as words to index beside its text (a username and a
    display name and a nickname: a question may use any of them); None when it gives none, or when the
    text carries their label already (a second copy would only make the memory longer)."""
    if text and carries_label(text, user, content):
        return None
    return " ".join(said_names(user, content)) or None


def indexed_text(record: Any, author_label: bool) -> str:
    """A record's text as the index reads it (its meaning, its neighbours' windows): labelled with its
    author's name when `author_label` (Retrieval.author_label)."""
    return labelled(record.text, record.user, record.content) if author_label else record.text


def addressed_as(text: str) -> str | None:
    """The name a turn addresses someone by ("Hey Mel!" -> "mel"), or None."""
    body = _LABEL.sub("", text, count=1)
    found = _AT_START.search(body) or _AT_END.search(body)
    if not found:
        return None
    name = found.group("name").casefold()
    plain = name_tokens(name)
    return plain[0] if plain and name not in STOPWORDS and name not in _NOT_NAMES else None


def directory(hits: Iterable[Hit]) -> dict[str, set[str]]:
    """Each author's names, as far as these hits tell: their own names, the speaker label their texts
    start with when two of them have it ("Caroline: ..." in a pasted or exported chat), and the names turns
    answering them call them by (a turn's addressee is the author of the turn it follows, when that is
    someone else)."""
    names: dict[str, set[str]] = {}
    labels: Counter[tuple[str, str]] = Counter()
    for hit in hits:
        user, text = hit.payload.get("user"), str(hit.payload.get("text", ""))
        if isinstance(user, str):
            names.setdefault(user, set()).update(author_names(hit.payload))
            labelled = _LABEL.match(text)
            if labelled:
                labels[(user, labelled.group("label"))] += 1
        addressee = hit.payload.get("contextUser")
        if isinstance(addressee, str) and addressee != user:
            called = addressed_as(text)
            if called:
                names.setdefault(addressee, set()).add(called)
    for (user, label), seen in labels.items():
        if seen >= 2:  # one "Note: ..." is not a name; a label an author's texts keep starting with is
            names[user].update(set(name_tokens(label)) - STOPWORDS)
    return names


def _similar(asked: str, name: str) -> bool:
    """Another spelling of a name (one edit, two for long names, the first letter kept), or its short form
    ("Mel" for Melanie)."""
    # imported here: rapidfuzz's package import loads its whole API (~80 ms), a cold start every function
    # importing the reads would pay, for a distance needed only when a name is not matched exactly
    from rapidfuzz.distance import OSA

    edits = 1 if max(len(asked), len(name)) < 8 else 2
    if len(asked) >= 4 and len(name) >= 4 and asked[0] == name[0] and OSA.distance(asked, name) <= edits:
        return True
    return len(asked) >= 3 and len(name) > len(asked) and name.startswith(asked)


# A user mention in Discord's message formatting (reference.mdx, Message Formatting: <@id>, and <@!id> as a
# string option of a slash command still sends it)
_MENTIONED = re.compile(r"<@!?(\d{1,20})>")


def naming_words(query: str, names: Mapping[str, set[str]]) -> dict[str, str]:
    """The authors a question names, each with the words of it that name them: a word of it that is one of
    their names, or (no author having that very name, and the word written as a name is, capitalised)
    another spelling or a short form of one — "join" is not John, "Jon" may be; and by a Discord mention of
    their user id, "<@80351110224678912>" (how a person is named in a Discord message or an /ask prompt)."""
    capitalised = {w.casefold() for w in re.findall(r"\b[^\W\d_a-z][^\W\d_]*", query)}
    asked = [w for w in dict.fromkeys(name_tokens(query)) if w not in STOPWORDS]
    out: dict[str, list[str]] = {}
    for word in asked:
        for user in _whose(word, names, word in capitalised):
            out.setdefault(user, []).append(word)
    for user in dict.fromkeys(_MENTIONED.findall(query)):
        if user in names:
            out.setdefault(user, []).append(user)
    return {user: " ".join(words) for user, words in out.items()}


def _whose(word: str, names: Mapping[str, set[str]], capitalised: bool) -> set[str]:
    """The authors one word of a question names."""
    exact = {user for user, theirs in names.items() if word in theirs}
    if exact or not capitalised:
        return exact
    return {user for user, theirs in names.items() if any(_similar(word, name) for name in theirs)}


# A question about the asker themselves ("what did I say about ...", "my sister's name")
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b", re.IGNORECASE)


def asked_names(hits: Sequence[Hit], query: str, asker: str | None = None) -> dict[str, str]:
    """The authors among these hits a question asks about, each with the words of it that name them: those
    it names, and the asker (no words) when it speaks of itself. What their memories have beside their
    text, as their author's names are: a question naming "Mel" is half answered by any memory of hers."""
    named = naming_words(query, directory(hits)) if len(hits) > 1 else {}
    if asker and _FIRST_PERSON.search(query):
        named.setdefault(asker, "")
    return named


# A word of a question, possessive or not, or a Discord mention (as naming_words reads them)
_WORD_OR_MENTION = re.compile(r"(?:<@!?(?P<id>\d{1,20})>|\b(?P<word>[^\W\d_]+))(?P<own>['\u2019]s\b)?")


def in_first_person(query: str, named: Mapping[str, str]) -> str | None:
    """The question as the named authors' own memories would put it: each word naming one of them
    (asked_names: a name, a nickname, another spelling, a mention) as "I", or "my" where possessive — "what
    did Melanie paint for Caroline's party?" -> "what did I paint for my party?". None: it names no one by a
    word, or its first person is the asker's already ("what did I tell Mel?" is about the asker's words to
    her, which may well say her name)."""
    naming = {word for words in named.values() for word in words.split()}
    if not naming or _FIRST_PERSON.search(query):
        return None

    def spoken(m: re.Match[str]) -> str:
        tokens = [m["id"]] if m["id"] else name_tokens(m["word"])
        if len(tokens) != 1 or tokens[0] not in naming:
            return m[0]
        return "my" if m["own"] else "I"

    said = _WORD_OR_MENTION.sub(spoken, query)
    return said if said != query else None


def favour(hits: Sequence[Hit], named: Mapping[str, str], weight: float) -> list[Hit]:
    """The hits of the `named` authors (asked_names) moved up by `weight` times the best hit's score; none
    moves when they are every author among the hits, or no one."""
    if not weight or not named or len(hits) < 2 or {h.payload.get("user") for h in hits} <= named.keys():
        return list(hits)
    lift = weight * max(h.score for h in hits)
    moved = [replace(h, score=h.score + lift) if h.payload.get("user") in named else h for h in hits]
    # a stable sort on the score alone: hits of equal score keep the order the search gave them, whose
    # ties were already settled (by the other leg's score, then id: vectors.base.ranked)
    return sorted(moved, key=lambda h: -h.score)
