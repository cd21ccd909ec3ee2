"""engram: long-term memory for chat bots."""
