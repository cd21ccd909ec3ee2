"""One router per resource: memories, embedder settings, operations, Discord's webhook."""
