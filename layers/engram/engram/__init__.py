"""engram: long-term memory for chat bots."""

__version__ = "1.9.0"
