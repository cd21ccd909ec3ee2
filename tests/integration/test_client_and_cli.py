"""engram's own client (sync and async) and the `engram` command against a running local stack."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid

import anyio
import pytest

from engram.cli import main
from engram.client import AsyncEngram, Engram, EngramError
from tests.integration.conftest import KEY


@pytest.fixture
def bot():
    return f"cli-{uuid.uuid4().hex[:8]}"


def run(stack, *argv: str, key: str = KEY) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), environ={"ENGRAM_URL": stack.url, "ENGRAM_API_KEY": key}, out=out)
    return code, out.getvalue()


def test_the_client_adds_searches_pages_exports_and_forgets(stack, bot):
    with Engram(stack.url, KEY) as engram:
        tea = engram.add(bot, "I drink green tea, not coffee.", user="ana")
        assert tea.id.startswith("mem:") and tea.userId == "ana"
        for n in range(3):
            engram.add(bot, f"Ana's fact number {n}.", user="ana")
        assert [m.id for m in engram.search(bot, "green tea", user="ana", limit=1)] == [tea.id]
        first = engram.list(bot, limit=2)
        assert len(first) == 2 and first.next is not None
        assert len(list(engram.all(bot, limit=2))) == 4  # every page, through `next`
        lines = [json.loads(line) for line in engram.export(bot)]
        assert {line["text"] for line in lines} >= {"I drink green tea, not coffee."}
        assert engram.forget(bot, "ana")["deleted"]["facts"] == 4
        assert len(engram.list(bot)) == 0
        with pytest.raises(EngramError) as refused:
            engram.get(bot, tea.id)
        assert refused.value.status == 404 and refused.value.code == "not_found"
    with Engram(stack.url, "wrong") as stranger, pytest.raises(EngramError) as unauthorized:
        stranger.bots()
    assert unauthorized.value.status == 401


def test_the_async_client_does_the_same_awaited(stack, bot):
    async def go():
        async with AsyncEngram(stack.url, KEY) as engram:
            added = await engram.add(bot, "The office plant is a monstera.", user="ben")
            found = await engram.search(bot, "office plant", user="ben")
            key = await engram.mint_key(bot, "ben", "laptop")
            listed = await engram.keys(bot, "ben")
            await engram.revoke_key(bot, "ben", key.id)
            return added, found, key, listed, await engram.keys(bot, "ben")

    added, found, key, listed, after = anyio.run(go)
    assert [m.id for m in found] == [added.id]
    assert key.key and key.key.startswith("egk_") and [k.id for k in listed] == [key.id] and after == []


def test_the_command_line_searches_exports_imports_and_forgets(stack, bot, tmp_path):
    assert (
        run(stack, "add", "--bot", bot, "--user", "cy", "My", "bike", "is", "a", "blue", "Brompton.")[0] == 0
    )
    code, said = run(stack, "search", "--bot", bot, "--user", "cy", "bicycle", "colour")
    assert code == 0 and "Brompton" in said and said.startswith("mem:")
    code, exported = run(stack, "export", "--bot", bot)
    assert code == 0 and "Brompton" in exported
    dump = tmp_path / "export.ndjson"
    dump.write_text(exported)
    other = f"{bot}-copy"
    code, imported = run(stack, "import", "--bot", other, str(dump))
    assert code == 0 and json.loads(imported)["facts"]["created"] == 1
    assert run(stack, "forget", "--bot", bot, "--user", "cy")[0] == 2  # not without --yes
    code, forgot = run(stack, "forget", "--bot", bot, "--user", "cy", "--yes")
    assert code == 0 and json.loads(forgot)["deleted"]["facts"] == 1
    assert run(stack, "--json", "list", "--bot", bot) == (0, "")


def test_the_command_is_a_real_process_with_one_line_errors(stack, bot):
    env = {**os.environ, "ENGRAM_URL": stack.url, "ENGRAM_API_KEY": KEY}
    cmd = [sys.executable, "-m", "engram.cli"]
    ok = subprocess.run([*cmd, "add", "--bot", bot, "Tea at four."], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and "Tea at four." in ok.stdout
    wrong = subprocess.run(
        [*cmd, "list", "--bot", bot], env={**env, "ENGRAM_API_KEY": "nope"}, capture_output=True, text=True
    )
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1 and "401 unauthorized" in wrong.stderr
    down = subprocess.run(
        [*cmd, "list", "--bot", bot],
        env={**env, "ENGRAM_URL": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
    )
    assert down.returncode == 1 and "cannot reach" in down.stderr and "Traceback" not in down.stderr
