"""engram: long-term memory for chat bots."""

__version__ = "1.12.0"
