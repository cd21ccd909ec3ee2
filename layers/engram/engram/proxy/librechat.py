"""What LibreChat really sends, read as LibreChat sends it: its side calls (titles, summaries, compaction,
activity and reasoning labels, its memory agent), placeholders it left unresolved, the file text it
prepends to a user message, the /memory commands and engram's answers it keeps in the history, and tool
rounds.

Sources (LibreChat's own code; copied shapes, no code):
- titles: `@librechat/agents` src/utils/title.ts (the completion and structured prompts, the `title` /
  `language` schema) and src/run.ts `generateTitle` (the convo template `User: {input}\\nAI: {output}`);
- summaries: `@librechat/agents` src/summarization/shared.ts (the checkpoint prompts,
  `buildSummarizationInstruction`: the semantic index, when there is one, opens the instruction) and
  src/summarization/semanticIndex.ts (`<compaction-semantic-index>`);
- manual compaction: LibreChat packages/api/src/agents/compact/summary.ts @ dce2a1f
  (`DEFAULT_COMPACTION_PROMPT`, `DEFAULT_COMPACTION_UPDATE_PROMPT`);
- activity, phase and reasoning labels: `@librechat/agents` src/prompts/activityLabel.ts,
  reasoningLabel.ts, sent by src/run.ts as a system prompt and one user message;
- the memory agent: LibreChat packages/api/src/agents/memory.ts @ 007bfc5 (`processMemory`: the tools
  `set_memory` / `delete_memory`, and the memory status it appends to the instructions, `# Existing
  memory:` or `# Memory Status:`); a chat agent with the same tools inline (`registerMemoryTools`) is a
  turn like any other;
- file context: LibreChat packages/api/src/files/context.ts @ be94e65 (`extractFileContext`:
  `Attached document(s):\\n```md` then, per file, `# "name"\\n` + text + `\\n`, files parted by
  `\\n\\n---\\n\\n`, closed by `\\n````) and packages/api/src/agents/client.ts @ 15cfe7e
  (`prependFileContext`: that block, a newline, then the user's text; `ATTACHMENT_ONLY_TEXT` when a file
  came without words);
- the user's names in a header: LibreChat packages/api/src/utils/env.ts @ 2fdfe69 (`resolveHeaders` ->
  `processUserPlaceholders`: `{{LIBRECHAT_USER_NAME}}` and `{{LIBRECHAT_USER_USERNAME}}` among
  `ALLOWED_USER_FIELDS`; a null field becomes "", a field the user object lacks stays as written).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

from ..names import MAX_NAME_CHARS
from .wire import Api, content_text

# The prompts LibreChat's own side calls open their newest user message with (their first words: a custom
# titlePrompt or summarization prompt is configured by the operator, who names its first words in
# MEMORY_SIDE_CALL_MARKERS)
SIDE_CALL_OPENINGS = {
    "Provide a concise, 5-word-or-less title for the conversation": "title",
    "Analyze this conversation and provide:\n1. The detected language of the conversation": "title",
    "Hold on, before you continue I need you to write me a checkpoint": "summary",
    "Hold on again, update your checkpoint": "summary",
    "<compaction-semantic-index>\n": "summary",
    "Write a checkpoint of everything so far. This checkpoint replaces the messages above": "compaction",
    "Update the checkpoint. Merge the new messages into the existing checkpoint": "compaction",
    "Write a short label describing what this block of agent activity accomplished": "activity label",
    "Summarize what this phase of an agent run accomplished": "activity label",
    "Write a short orientation title for a user-visible reasoning step": "activity label",
}
# ...and the system prompts its labels are sent with (the user message holds the evidence: a reasoning
# snapshot, tool calls; never the user speaking)
SYSTEM_OPENINGS = {
    "Write a short label describing what this block of agent activity accomplished": "activity label",
    "Summarize what this phase of an agent run accomplished": "phase label",
    "Write a short orientation title for a user-visible reasoning step": "reasoning label",
}
MEMORY_AGENT_TOOLS = {"set_memory", "delete_memory"}
# What LibreChat's memory agent appends to its instructions (processMemory's memoryStatus); a chat agent
# holding the same tools inline gets "# Existing memory about the user:" instead, or nothing
MEMORY_AGENT_STATUS = ("# Existing memory:\n", "# Memory Status:\nCurrent memory usage:")
TITLE_FIELDS = {"title", "language"}
PLACEHOLDER = re.compile(r"\{\{[^{}]*\}\}|\$\{[^{}]*\}")
# The block extractFileContext builds opens so; it closes with a fence on a line of its own after a blank
# line (the file's text ends with a newline, then "\n```")
FILE_CONTEXT_OPENING = re.compile(r'\AAttached document\(s\):\n```md\n?# "')
FILE_CONTEXT_CLOSINGS = re.compile(r"\n\n```(?=\n|\Z)")
FENCE = re.compile(r"^```", re.MULTILINE)
# What LibreChat sends for a turn that is only a file (no words of the user's)
ATTACHMENT_ONLY_TEXT = "Please refer to the attached file(s)."


# Whether a text is a /memory command under a prefix (engram.proxy.memory.is_command)
IsCommand = Callable[[str, str], bool]


def unresolved(value: str | None) -> bool:
    """A header LibreChat should have filled in but sent as written ({{LIBRECHAT_USER_ID}}, ${VAR})."""
    return value is not None and bool(PLACEHOLDER.search(value))


def author_content(name: str | None, username: str | None) -> dict[str, str] | None:
    """What a fact keeps of its author's LibreChat names, as a Discord message keeps its author's
    (`displayName`, `author`: engram.names reads both): a name sent empty, with its placeholder unresolved
    (an install that does not set the header), or too long is left out; None when neither is left."""
    kept = {field: _header_text(value) for field, value in (("displayName", name), ("author", username))}
    out = {
        field: value
        for field, value in kept.items()
        if value
        and not unresolved(value)
        and len(value) <= MAX_NAME_CHARS
        and all(c.isprintable() for c in value)
    }
    return out or None


def _header_text(value: str | None) -> str:
    """A header's text: Starlette decodes a header as latin-1, as Node sends a name LibreChat fills in
    ("José" as one byte a letter); a client that sent UTF-8 bytes gets them read as UTF-8."""
    if not value:
        return ""
    with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):  # else latin-1 it was
        value = value.encode("latin-1").decode("utf-8")
    return " ".join(value.split())


def own_text(text: str) -> str:
    """A user message without the file text LibreChat prepends to it (an attached CV is not the user
    speaking about themselves)."""
    own = _without_file_context(text.lstrip()).strip()
    return "" if own == ATTACHMENT_ONLY_TEXT else own


def _without_file_context(text: str) -> str:
    """The text after LibreChat's file block. A file may hold markdown with fences of its own, and so may
    the user's words: the block's closing fence is the last fence after a blank line with an even number
    of fences before it (the files' fences are balanced; a fence the user opens has an odd number)."""
    opening = FILE_CONTEXT_OPENING.match(text)
    if opening is None:
        return text
    rest = ""  # never closed (cut short): all of it is the file
    for closing in FILE_CONTEXT_CLOSINGS.finditer(text, opening.end()):
        if len(FENCE.findall(text, opening.end(), closing.start() + 2)) % 2 == 0:
            rest = text[closing.end() :]
    return rest


def _functions(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a request offers: OpenAI's {"type": "function", "function": {...}}, Anthropic's flat ones."""
    out = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            out.append(function if isinstance(function, dict) else tool)
    return out


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {f["name"] for f in _functions(body) if isinstance(f.get("name"), str)}


def _schemas(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON schemas a request asks its answer to follow: tools' parameters (OpenAI), input schemas
    (Anthropic), and a response_format's schema."""
    out = []
    for function in _functions(body):
        schema = function.get("parameters") or function.get("input_schema")
        if isinstance(schema, dict):
            out.append(schema)
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"].get("schema")
        if isinstance(schema, dict):
            out.append(schema)
    return out


def side_call(body: dict[str, Any], markers: tuple[str, ...] = ()) -> str | None:
    """What kind of LibreChat side call a request is, or None for a chat turn. A side call is LibreChat
    asking the model something about the chat (its title, a summary, a label) or its memory agent at work:
    it carries the conversation id like a turn does, but it is not the user speaking."""
    system = system_text(body)
    if MEMORY_AGENT_TOOLS & _tool_names(body) and _memory_agent(system, body):
        return "memory agent"
    if _asks_for_a_title(_schemas(body)):
        return "title"
    text = _last_user_text(body)
    kind = _opened_by(system, SYSTEM_OPENINGS) or _opened_by(text, SIDE_CALL_OPENINGS)
    if kind is None and any(marker and marker in text for marker in markers):
        return "configured"
    return kind


def _opened_by(text: str, openings: dict[str, str]) -> str | None:
    """The kind of side call whose prompt the text opens with, if any."""
    return next((kind for opening, kind in openings.items() if text.startswith(opening)), None)


def _memory_agent(system: str, body: dict[str, Any]) -> bool:
    """LibreChat's memory agent: its memory status in the instructions (Bedrock's run carries them in
    the first user message instead)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    text = system + "\n" + (content_text(first_user.get("content")) if first_user else "")
    return any(status in text for status in MEMORY_AGENT_STATUS)


def system_text(body: dict[str, Any]) -> str:
    """The request's system prompt: OpenAI's leading system (or developer) messages, Anthropic's `system`."""
    system = body.get("system")
    if system is not None:
        return content_text(system).lstrip()
    parts = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        parts.append(content_text(message.get("content")))
    return "\n".join(parts).lstrip()


def _asks_for_a_title(schemas: list[dict[str, Any]]) -> bool:
    """A structured title call: every schema offered holds title fields only, and one asks for a title."""
    fields = [set(s.get("properties") or {}) for s in schemas]
    return bool(fields) and all(f <= TITLE_FIELDS for f in fields) and any("title" in f for f in fields)


def _last_user_text(body: dict[str, Any]) -> str:
    """The newest user message's text, leading white space dropped ('' when there is none)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    return content_text(last.get("content")).lstrip() if last else ""


def user_turn(body: dict[str, Any]) -> tuple[int, str]:
    """(index, own text) of the message that opened this turn: the newest user message with text of its
    own. In a tool round the request ends with tool results (OpenAI `role: "tool"`, Anthropic `tool_result`
    blocks), which are not the user speaking; (-1, "") when there is none."""
    messages = body.get("messages") or []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            text = own_text(content_text(message.get("content")))
            if text:
                return index, text
    return -1, ""


def in_tool_round(body: dict[str, Any]) -> bool:
    """Whether the request continues a turn after tool calls (its last message carries tool results)."""
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    if last.get("role") == "tool":
        return True
    content = last.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def without_commands(body: dict[str, Any], prefix: str, is_command: IsCommand) -> dict[str, Any]:
    """The request without the /memory commands in its history and engram's answers to them: LibreChat
    stores both as messages and sends them back on every later turn. The newest message is left as sent."""
    messages = body.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        return body
    kept: list[Any] = []
    skip_answer = False
    for message in messages[:-1]:
        role = message.get("role") if isinstance(message, dict) else None
        if skip_answer and role == "assistant":
            skip_answer = False
            continue
        skip_answer = False
        if role == "user" and is_command(own_text(content_text(message.get("content"))), prefix):
            skip_answer = True
            continue
        kept.append(message)
    if len(kept) == len(messages) - 1:
        return body
    return {**body, "messages": [*kept, messages[-1]]}


# engram's answers to the chat-setting commands (memory.ChatMemory._run_setting), as LibreChat keeps them
SETTING_ANSWERS = {
    "Memory is now on for this chat.": True,
    "Memory is now off for this chat.": False,
    "This chat follows ": None,  # /memory reset: back to the user's default or the server's
}


def setting_in_history(body: dict[str, Any], prefix: str, is_command: IsCommand) -> bool | None:
    """The chat setting the history's last /memory on|off|reset set, by engram's answer to it (a command
    that was refused or failed set nothing), or None. A chat LibreChat forks or duplicates gets a new
    conversation id but a copy of the history (LibreChat api/server/utils/import/fork.js clones the messages
    up to the fork point), so the command that set the original chat's setting comes with it."""
    messages = [m for m in (body.get("messages") or [])[:-1] if isinstance(m, dict)]
    setting: bool | None = None
    for asked, answer in zip(messages, messages[1:], strict=False):
        if asked.get("role") != "user" or answer.get("role") != "assistant":
            continue
        if not is_command(own_text(content_text(asked.get("content"))), prefix):
            continue
        said = content_text(answer.get("content")).strip()
        for opening, value in SETTING_ANSWERS.items():
            if said.startswith(opening):
                setting = value
    return setting


def place_block(
    api: Api, body: dict[str, Any], index: int, text: str, placement: str = "system"
) -> dict[str, Any]:
    """A copy of the request with engram's block (memories, the date), never a system message after a
    non-system one (local models' chat templates refuse that: Qwen's raise "System message must be at the
    beginning", llama-server answers 400). OpenAI-style, placement "system": at the end of the leading
    system message, so LibreChat's instructions before it stay a cached prefix; with none, or placement
    "user": a text at the start of the turn's user message, so every byte before that message (the system
    prompt and the history) stays the same from turn to turn. Anthropic (no system role inside
    `messages`): always at the start of the turn's user message, for the same cache."""
    messages = list(body.get("messages") or [])
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    if api == "openai" and placement == "system" and first.get("role") in ("system", "developer"):
        messages[0] = {**first, "content": _appended(first.get("content"), text)}
        return {**body, "messages": messages}
    return {**body, "messages": _opening_the_turn(api, messages, index, text)}


def _opening_the_turn(api: Api, messages: list[Any], index: int, text: str) -> list[Any]:
    """The messages with engram's block opening the turn's user message (a user message of its own at
    the end when the turn has none)."""
    if index < 0 or index >= len(messages):
        return [*messages, {"role": "user", "content": [{"type": "text", "text": text}]}]
    message = dict(messages[index])
    content = message.get("content")
    if api == "openai" and isinstance(content, str):
        message["content"] = f"{text}\n\n{content}"
    else:
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        message["content"] = [{"type": "text", "text": text}, *blocks]
    messages[index] = message
    return messages


def _appended(content: Any, text: str) -> Any:
    """A system message's content with engram's block after what it says (a string or a list of parts)."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return f"{content}\n\n{text}" if content else text
