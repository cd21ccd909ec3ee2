"""The shapes LibreChat's server builds around a chat, for tests. Its server code (packages/api) is not
published as a package, so these are copied from its source, each with the file and commit it was read
at; what its published packages build (@librechat/agents: titles, summaries, labels; the agent runs
themselves) is built by those packages in infra/librechat/drive-proxy.mjs instead.

- `file_context`: packages/api/src/files/context.ts @ be94e65f2772 `extractFileContext`;
- `prepend`: packages/api/src/agents/client.ts @ 15cfe7eebddd `prependFileContext` (string content);
- `ATTACHMENT_ONLY_TEXT`: packages/api/src/files/context.ts, the note a file-only turn carries;
- `COMPACTION_PROMPT`: packages/api/src/agents/compact/summary.ts @ dce2a1f77a79 (first paragraph);
- the memory agent's prompts: packages/api/src/agents/memory.ts @ 007bfc5d5ad0 (`getDefaultInstructions`,
  the `memoryStatus` of `processMemory`, `memoryToolUsageGuard`).
"""

from __future__ import annotations

ATTACHMENT_ONLY_TEXT = "Please refer to the attached file(s)."

COMPACTION_PROMPT = (
    "Write a checkpoint of everything so far. This checkpoint replaces the messages above, so capture "
    "everything needed to pick right back up."
)

MEMORY_AGENT_INSTRUCTIONS = (
    "Use the `set_memory` tool to save important information about the user, but ONLY when the user has "
    "requested you to remember something."
)
MEMORY_AGENT_STATUS = "# Existing memory:\nNo existing memories"
MEMORY_TOOL_USAGE_GUARD = (
    "Only use the `set_memory` and `delete_memory` tools when the user explicitly asks you to remember, "
    'update, or forget something (e.g. "remember that...", "don\'t forget...", "forget..."). Never store '
    "information merely because the user mentioned it in conversation."
)


def file_context(*files: tuple[str, str]) -> str:
    """The block extractFileContext builds from text files (name, text): no newline after ```md, each
    file's text followed by a newline, files parted by a rule, the fence closed on a line of its own."""
    text = ""
    for name, body in files:
        text += ("Attached document(s):\n```md" if not text else "\n\n---\n\n") + f'# "{name}"\n{body}\n'
    return text + "\n```"


def prepend(context: str, content: str) -> str:
    """A user message's string content after prependFileContext: the block, a newline, the user's text."""
    return f"{context}\n{content}"
