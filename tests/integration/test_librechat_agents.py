"""engram's proxy driven by LibreChat's own agent runtime (@librechat/agents 3.9.2, npm, pinned in
infra/librechat): a chat turn, a streamed turn, an agent turn with a tool of the test's own, a turn with
LibreChat's inline memory tools, its memory agent's run, a title by both title methods, reasoning and
activity labels, a summary and a manual compaction with a semantic index, each with the headers
LibreChat's endpoint sends (infra/librechat/drive-proxy.mjs). LibreChat's server itself needs MongoDB and
cannot run here; its agent runtime is what calls the model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import KEY, proxy_stack
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "infra" / "librechat" / "drive-proxy.mjs"
OFFLINE = ROOT / "infra" / "librechat" / "offline.mjs"  # refuses other hosts at once (no DNS waits)
PROXY_KEY = "agents-proxy-key"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, upstream):
    upstreams = [{"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": "sk-held"}]
    s = proxy_stack(tmp_path_factory.mktemp("engram"), local_embedder, upstreams, PROXY_KEY)
    yield s
    s.stop()


def librechat(stack, action: str, say: str, user: str, sent: Path | None = None, **extra) -> dict:
    """One call as LibreChat's runtime makes it, with the endpoint's identity headers filled in (the
    bodies it sent appended to `sent`, one JSON line each)."""
    args = {
        "action": action,
        "baseURL": f"{stack.url}/oa/v1",
        "apiKey": PROXY_KEY,
        "headers": {"x-librechat-user-id": user, "x-librechat-conversation-id": f"conv-{user}"},
        "say": say,
        **extra,
    }
    env = {**os.environ, **({"LIBRECHAT_SENT": str(sent)} if sent else {})}
    done = subprocess.run(
        ["node", "--import", OFFLINE.as_uri(), str(DRIVER), json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def memories_of(stack, user: str) -> list[str]:
    listed = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories",
        params={"userId": user},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["memories"]
    return [m["text"] for m in listed]


def roles(request: dict) -> list[str]:
    return [m["role"] for m in request["json"]["messages"]]


@pytest.mark.parametrize("action", ["chat", "stream"])
def test_a_turn_is_told_the_time_and_its_fact_is_kept(stack, upstream, action):
    user = f"agent-{action}"
    out = librechat(stack, action, "My favourite city is Porto.", user)
    assert "fake upstream" in json.dumps(out["content"])
    sent = upstream.chats()[-1]
    assert roles(sent) == ["system", "user"]  # one system message: a local model's template takes no other
    instructions = sent["json"]["messages"][0]["content"]
    assert instructions.startswith("You are a helpful assistant.\n\n<!-- engram:datetime -->")
    assert wait_until(lambda: "The user's favourite city is Porto." in memories_of(stack, user), timeout_s=30)


def test_an_agent_turn_with_a_tool_keeps_the_users_fact_and_not_the_tools(stack, upstream):
    user = "agent-tools"
    out = librechat(stack, "tools", "My diet is vegetarian. Find restaurants in Lisbon.", user)
    assert any(part.get("type") == "tool_call" for part in out["content"])
    first, second = upstream.chats()[-2:]
    assert roles(second)[-2:] == ["assistant", "tool"]  # the round after the tool ran
    assert first["json"]["messages"][0] == second["json"]["messages"][0]  # one block for the whole turn
    assert wait_until(lambda: "The user's diet is vegetarian." in memories_of(stack, user), timeout_s=30)
    stack.settle()
    assert not [m for m in memories_of(stack, user) if "bacalhau" in m]


@pytest.mark.parametrize("method", ["completion", "structured"])
def test_a_title_reaches_the_provider_untouched_and_queues_nothing(stack, upstream, method):
    user = f"agent-title-{method}"
    title = librechat(stack, "title", "My favourite city is Porto.", user, titleMethod=method)
    assert title["title"]
    sent = upstream.chats()[-1]["json"]
    assert "engram:" not in json.dumps(sent)  # no date, no memories
    assert roles({"json": sent}) == ["user"]  # LibreChat's title prompt, alone, as it sent it
    stack.settle()
    assert memories_of(stack, user) == []


def test_a_turn_with_librechats_memory_tools_is_recalled_extracted_and_answers_commands(
    stack, upstream, tmp_path
):
    """LibreChat's Memory toggle puts set_memory / delete_memory among the chat agent's own tools
    (registerMemoryTools): that is still the user speaking, and engram's memory works beside LibreChat's."""
    user = "agent-memory-tools"
    librechat(stack, "memory-tools", "My employer is Initech.", user)
    sent = upstream.chats()[-1]["json"]
    assert "<!-- engram:datetime -->" in sent["messages"][0]["content"]
    assert {t["function"]["name"] for t in sent["tools"]} == {"set_memory", "delete_memory"}
    assert wait_until(lambda: "The user's employer is Initech." in memories_of(stack, user), timeout_s=30)
    # "Where do I work?" would not do: MiniLM puts it at cosine 0.22 to the fact, where unrelated texts
    # are, so recall's relevance floor leaves it out: the price of a floor (docs/memory-api.md, Relevance)
    librechat(stack, "memory-tools", "Who is my employer?", user)
    assert "Initech" in upstream.chats()[-1]["json"]["messages"][0]["content"]  # recalled
    stack.settle()  # the last turn's extraction, queued behind its answer, reaches the provider first
    before = len(upstream.requests)
    out = librechat(stack, "memory-tools", "/memory status", user)
    assert "Memory is on" in json.dumps(out["content"])
    # engram answers the command itself: nothing it sends the provider from here on holds it
    assert not [r for r in upstream.requests[before:] if "/memory status" in json.dumps(r)]


@pytest.mark.parametrize(
    "action", ["memory-agent", "reasoning-label", "activity-label", "summary", "compaction"]
)
def test_librechats_side_calls_reach_the_provider_byte_for_byte_and_store_nothing(
    stack, upstream, tmp_path, action
):
    """Its memory agent's run, its labels (a system prompt and the evidence: here a reasoning snapshot
    quoting the user), its summaries and compactions opening with a semantic index: none is the user
    speaking. The provider gets the very bytes LibreChat's runtime sent, and nothing is stored."""
    user, sent = f"agent-side-{action}", tmp_path / "sent.jsonl"
    before = len(upstream.requests)
    librechat(stack, action, "The user told me their employer is Initech.", user, sent=sent)
    bodies = [json.loads(line)["body"] for line in sent.read_text().splitlines()]
    received = upstream.requests[before:]  # (LibreChat's identity headers are not the provider's to see)
    assert bodies and [r["raw"] for r in received] == bodies
    assert "engram:" not in "".join(bodies) + json.dumps([r["json"] for r in received])
    stack.settle()
    assert memories_of(stack, user) == []
