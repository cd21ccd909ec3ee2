"""LibreChat's side of the compose test, run inside the compose network in place of LibreChat's image
(which cannot be pulled here): it calls engram exactly as librechat.yaml tells LibreChat to, by the
service's name. Argument: JSON {"endpoint": {baseURL, apiKey, headers}, "mcp": {url, headers}, "say": [...]}.
Prints JSON: the chat answers and what the MCP search for "cat" found."""

import json
import sys
import time

import anyio
import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def chat(endpoint: dict, text: str) -> str:
    headers = {**endpoint["headers"], "Authorization": f"Bearer {endpoint['apiKey']}"}
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    said = httpx.post(f"{endpoint['baseURL']}/chat/completions", json=body, headers=headers, timeout=60)
    said.raise_for_status()
    return said.json()["choices"][0]["message"]["content"]


def search(mcp: dict, query: str) -> str:
    async def run():
        async with (
            httpx2.AsyncClient(headers=mcp["headers"], timeout=30) as http,
            streamable_http_client(mcp["url"], http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("search_memory", {"query": query, "limit": 3})
            return found.content[0].text

    return anyio.run(run)


def main() -> None:
    args = json.loads(sys.argv[1])
    base = args["endpoint"]["baseURL"].split("/openai/")[0]
    deadline = time.monotonic() + 120
    while True:  # the service may still be starting: LibreChat retries too
        try:
            if httpx.get(f"{base}/livez", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            sys.exit("engram did not answer on the compose network")
        time.sleep(0.5)
    answers = []
    for text in args.get("say", []):
        answers.append(chat(args["endpoint"], text))
        remembered(args["mcp"])  # as a person would: the next turn comes after the fact is kept
    print(json.dumps({"answers": answers, "found": remembered(args["mcp"])}))


def remembered(mcp: dict) -> str:
    """What the MCP search for "cat" finds once the fact is there (a worker job writes it, moments after
    the turn), or after 30 s."""
    found = ""
    for _ in range(60):
        found = search(mcp, "cat")
        if "Miso" in found:
            break
        time.sleep(0.5)
    return found


if __name__ == "__main__":
    main()
