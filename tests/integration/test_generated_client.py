"""A client generated from the live app's /openapi.json (openapi-python-client, as the README shows)
works as is: list, search, add, update, remove and the embedder settings, typed end to end."""

import importlib
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import KEY


@pytest.fixture(scope="module")
def generated(stack, tmp_path_factory):
    """Generate the client into a temporary directory and import it."""
    out = tmp_path_factory.mktemp("client")
    (out / "openapi.json").write_text(httpx.get(f"{stack.url}/openapi.json").text)
    tool = Path(sys.executable).parent / "openapi-python-client"
    run = subprocess.run(
        [str(tool), "generate", "--path", "openapi.json", "--meta", "none"],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("engram_memory_api_client")
    finally:
        sys.path.remove(str(out))


def test_a_generated_client_lists_searches_adds_updates_removes_and_sets(stack, generated):
    from engram_memory_api_client import AuthenticatedClient
    from engram_memory_api_client.api.memories import (
        add_memory,
        change_memory,
        get_memory,
        list_memories,
        remove_memory,
    )
    from engram_memory_api_client.api.settings import change_settings, embedding_progress, get_settings
    from engram_memory_api_client.models import (
        EmbeddingSettingsPatch,
        ErrorResponse,
        ListMemoriesKind,
        MemoryChange,
        MemoryList,
        MemoryOut,
        NewMemory,
    )

    client = AuthenticatedClient(base_url=stack.url, token=KEY)
    added = add_memory.sync(
        "gen", client=client, body=NewMemory(text="The cat is called Miso.", user_id="u1")
    )
    assert isinstance(added, MemoryOut) and added.text == "The cat is called Miso." and added.user_id == "u1"
    add_memory.sync("gen", client=client, body=NewMemory(text="Dinner is at seven on Sundays."))
    listed = list_memories.sync("gen", client=client, kind=ListMemoriesKind.FACT)
    assert isinstance(listed, MemoryList)
    assert [m.text for m in listed.memories] == ["Dinner is at seven on Sundays.", "The cat is called Miso."]
    found = list_memories.sync("gen", client=client, query="what is the pet's name", limit=1)
    assert found.memories[0].id == added.id and found.memories[0].score > 0
    changed = change_memory.sync(
        "gen", added.id, client=client, body=MemoryChange(text="The cat is called Mochi.")
    )
    assert changed.id == added.id and changed.text == "The cat is called Mochi."
    assert get_memory.sync("gen", added.id, client=client).text == "The cat is called Mochi."
    assert remove_memory.sync_detailed("gen", added.id, client=client).status_code == 204
    missing = get_memory.sync("gen", added.id, client=client)
    assert isinstance(missing, ErrorResponse) and missing.error.code == "not_found"
    settings = get_settings.sync(client=client)
    assert settings.embedder.value == "local"
    updated = change_settings.sync(client=client, body=EmbeddingSettingsPatch(message_vectors=4000))
    assert updated.message_vectors == 4000
    change_settings.sync(client=client, body=EmbeddingSettingsPatch(message_vectors=settings.message_vectors))
    progress = embedding_progress.sync(client=client)
    assert progress.memories >= 1
    stranger = AuthenticatedClient(base_url=stack.url, token="wrong")
    refused = list_memories.sync_detailed("gen", client=stranger)
    assert refused.status_code == 401 and isinstance(refused.parsed, ErrorResponse)
