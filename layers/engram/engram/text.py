"""Text rules shared by every front door: limits, folding for duplicates, memory ids."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

from .errors import InvalidInput

MAX_FACT_CHARS = 1000
_SPACE = re.compile(r"\s+")
# Bot, user, server, project and thread names, and memory ids: checked by the service, documented in
# the OpenAPI document and enforced on Discord's ids from these same patterns.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
MEMORY_ID_PATTERN = r"^(?:mem:)?([1-9][0-9]{0,17})$"
_MEMORY_ID = re.compile(MEMORY_ID_PATTERN)


def encodable(text: str) -> bool:
    """Whether a string can be stored and sent as UTF-8 (a lone surrogate such as \\ud800 cannot)."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Characters that change how the text around them is laid out without showing themselves: the line and
# paragraph separators (a line break to a model, to JavaScript, not to JSON) and the bidi embeddings,
# overrides and isolates (U+202E shows "gnp.exe" as "exe.png"). A fact refuses them; a quoted text
# escapes them.
_LAYOUT = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def quoted_json(value: object) -> str:
    """JSON of stored words as a model is shown them: non-ASCII kept readable, the layout characters
    escaped (\\u2028, \\u202e, ...) so they neither break a line nor reorder what follows."""
    return _LAYOUT.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))


def check_text(what: str, text: str, controls: bool = False) -> str:
    """Refuse a string that cannot be stored as UTF-8 or (unless `controls`) holds control characters
    other than tab and newlines, naming the field."""
    if not encodable(text):
        raise InvalidInput(f"{what} contains a lone surrogate (an invalid Unicode character)")
    if not controls and _CONTROL.search(text):
        raise InvalidInput(f"{what} contains control characters (only tab and newlines are allowed)")
    return text


def check_json(what: str, value: object, depth: int = 0) -> object:
    """Refuse JSON content with a string (or key) that cannot be stored as UTF-8, or nested too deep."""
    if depth > 32:
        raise InvalidInput(f"{what} is nested more than 32 levels deep")
    if isinstance(value, str):
        check_text(what, value, controls=True)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(f"{what} (a key)", str(key), controls=True)
            check_json(what, item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_json(what, item, depth + 1)
    return value


def scrub(text: str) -> str:
    """A lone surrogate replaced by U+FFFD: for text engram only reads (a chat turn it relays)."""
    if encodable(text):
        return text
    # through UTF-16 with surrogatepass: valid pairs recombine, lone halves become U+FFFD
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def clean_fact(text: object) -> str:
    """Trim a fact and check its length (1-1,000 characters), or raise InvalidInput."""
    if not isinstance(text, str):
        raise InvalidInput("text must be a string")
    check_text("text", text)
    layout = _LAYOUT.search(text)
    if layout:
        raise InvalidInput(
            f"text contains U+{ord(layout.group()):04X}, a character that breaks lines or reorders text "
            "without showing itself; a memory may not hold it"
        )
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
