"""Text rules shared by every front door: limits, folding for duplicates, memory ids."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from .errors import InvalidInput

MAX_FACT_CHARS = 1000
_SPACE = re.compile(r"\s+")
_MEMORY_ID = re.compile(r"^(?:mem:)?([1-9][0-9]{0,17})$")


def clean_fact(text: object) -> str:
    """Trim a fact and check its length (1-1,000 characters), or raise InvalidInput."""
    if not isinstance(text, str):
        raise InvalidInput("text must be a string")
    cleaned = text.strip()
    if not cleaned:
        raise InvalidInput("text is empty")
    if len(cleaned) > MAX_FACT_CHARS:
        raise InvalidInput(f"text is {len(cleaned)} characters; a memory holds at most {MAX_FACT_CHARS}")
    return cleaned


def fold(text: str) -> str:
    """The form two texts share when they differ only in case, spacing or Unicode composition."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def fold_digest(text: str) -> str:
    """A short stable digest of the folded text, used as a uniqueness key."""
    return hashlib.sha256(fold(text).encode()).hexdigest()[:32]


def parse_memory_id(raw: str | int) -> int:
    """Accept `12` or `mem:12`; raise InvalidInput for anything else."""
    match = _MEMORY_ID.match(str(raw).strip())
    if not match:
        raise InvalidInput(f"{raw!r} is not a memory id (expected 12 or mem:12)")
    return int(match.group(1))


def format_memory_id(memory_id: int) -> str:
    """How a memory id is shown: `mem:12`."""
    return f"mem:{memory_id}"
