"""What Discord answered that is not a success, apart from rate limits (engram.discord.limits)."""

from __future__ import annotations

import json

# topics/opcodes-and-status-codes.mdx, "JSON Error Codes": what a 404 means
UNKNOWN_CHANNEL = 10003  # the channel (or thread, or forum post) is gone
UNKNOWN_GUILD = 10004
UNKNOWN_MESSAGE = 10008


class DiscordError(Exception):
    """Discord answered with an error other than a rate limit; `code` is its JSON error code (0: none)."""

    def __init__(self, status: int, text: str):
        super().__init__(f"Discord answered {status}: {text[:200]}")
        self.status = status
        self.code = _code(text)

    @property
    def gone(self) -> bool:
        """Whether what was asked for no longer exists (a deleted message, channel, thread or server)."""
        return self.status == 404 and self.code in (UNKNOWN_CHANNEL, UNKNOWN_GUILD, UNKNOWN_MESSAGE)


def _code(text: str) -> int:
    try:
        body = json.loads(text)
    except ValueError:
        return 0
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else 0
