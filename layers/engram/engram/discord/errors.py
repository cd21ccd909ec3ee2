"""What Discord answered that is not a success, apart from rate limits (engram.discord.limits)."""

from __future__ import annotations


class DiscordError(Exception):
    """Discord answered with an error other than a rate limit."""

    def __init__(self, status: int, text: str):
        super().__init__(f"Discord answered {status}: {text[:200]}")
        self.status = status
