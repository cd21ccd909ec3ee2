"""Export a bot from one local stack, import it into a fresh one: the same lists, the same search results;
imports are idempotent and check every line."""

import json

import httpx
import pytest

from infra.local_stack import LocalStack
from tests.integration.conftest import KEY
from tests.local_process import KEY as CRASH_KEY
from tests.local_process import Stack
from tests.support import wait_until

FACTS = [
    ("Lena's birthday is on the ninth of March.", "u1", "g1"),
    ("The garage door code is 4417.", "u2", None),
    ("The team's standup is at 9:30 on weekdays.", None, "g1"),
    ("Marco is allergic to peanuts.", "u1", None),
]
MESSAGES = [
    {
        "id": f"d{i}",
        "text": text,
        "userId": user,
        "serverId": "g1",
        "threadId": "c1",
        "createdAt": f"2026-10-0{1 + i // 3}T10:0{i % 3}:00Z",
        **({"content": {"author": user, "attachments": []}} if i % 2 else {}),
    }
    for i, (text, user) in enumerate(
        [
            ("Anyone up for sailing on Saturday?", "u1"),
            ("Only if the wind drops below 20 knots.", "u2"),
            ("The forecast says 12 knots.", "u1"),
            ("Then I'll bring the thermos of tea.", "u2"),
            ("The boat needs new sails before winter.", "u1"),
            ("I know a sailmaker in Porto.", "u3"),
        ]
    )
]
QUERIES = [
    ("fact", "when is Lena's birthday"),
    ("fact", "food allergy"),
    ("message", "wind speed for sailing"),
    ("message", "hot drink"),
]


def client(stack) -> httpx.Client:
    key = KEY if isinstance(stack, LocalStack) else CRASH_KEY
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def without_ids(memories: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in ("id", "score")} for m in memories]


@pytest.fixture(scope="module")
def source(stack):
    with client(stack) as api:
        for text, user, server in FACTS:
            assert (
                api.post(
                    "/v1/bots/porta/memories", json={"text": text, "userId": user, "serverId": server}
                ).status_code
                == 201
            )
        assert api.post("/v1/bots/porta/messages", json={"messages": MESSAGES}).json()["created"] == len(
            MESSAGES
        )
        yield api


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A second stack as its own process (`make run` on a new data dir): one process holds one engine."""
    s = Stack(tmp_path_factory.mktemp("fresh"), {}).start()
    yield s
    s.stop()


def test_export_streams_every_record_with_all_its_fields(source):
    r = source.get("/v1/bots/porta/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [line["kind"] for line in lines] == ["fact"] * len(FACTS) + ["message"] * len(MESSAGES)
    assert [line["text"] for line in lines[: len(FACTS)]] == [f[0] for f in FACTS]  # oldest first
    sailing = next(line for line in lines if line.get("sourceMessageId") == "d1")
    assert sailing["threadId"] == "c1" and sailing["content"] == {"author": "u2", "attachments": []}
    assert (
        sailing["context"] == "Anyone up for sailing on Saturday?"
        and sailing["createdAt"] == "2026-10-01T10:01:00.000Z"
    )
    mine = [
        json.loads(line)
        for line in source.get("/v1/bots/porta/export", params={"userId": "u1"}).text.splitlines()
    ]
    assert mine and {line["userId"] for line in mine} == {"u1"}
    assert len(mine) == sum(1 for f in FACTS if f[1] == "u1") + sum(
        1 for m in MESSAGES if m["userId"] == "u1"
    )
    assert source.get("/v1/bots/bad name/export").status_code == 400


def test_import_into_a_fresh_stack_gives_the_same_lists_and_search_results(source, fresh):
    export = source.get("/v1/bots/porta/export").text
    with client(fresh) as api:
        result = api.post(
            "/v1/bots/porta/import", content=export, headers={"content-type": "application/x-ndjson"}
        ).json()
        assert result == {
            "facts": {"created": len(FACTS), "existing": 0},
            "messages": {"created": len(MESSAGES), "existing": 0},
            "forgotten": 0,
            "errors": [],
        }
        again = api.post("/v1/bots/porta/import", content=export).json()  # idempotent
        assert again["facts"] == {"created": 0, "existing": len(FACTS)}
        assert again["messages"] == {"created": 0, "existing": len(MESSAGES)}
        for kind in ("fact", "message"):
            assert without_ids(
                api.get("/v1/bots/porta/memories", params={"kind": kind}).json()["memories"]
            ) == without_ids(source.get("/v1/bots/porta/memories", params={"kind": kind}).json()["memories"])

        def searched(c, kind, query):
            hits = c.get("/v1/bots/porta/memories", params={"kind": kind, "query": query, "limit": 3}).json()[
                "memories"
            ]
            return [(h["text"], round(h["score"], 4)) for h in hits]

        def same_results():  # the vectors are made by index jobs after the import answered
            return all(searched(api, kind, q) == searched(source, kind, q) for kind, q in QUERIES)

        assert wait_until(same_results, timeout_s=60), [
            (searched(api, k, q), searched(source, k, q)) for k, q in QUERIES
        ]


def test_a_bad_line_is_reported_by_number_and_nothing_of_it_is_stored(fresh):
    lines = [
        json.dumps({"kind": "fact", "text": "The piano was tuned in May."}),
        "{not json",
        json.dumps({"kind": "message", "text": "no source id"}),
        json.dumps({"kind": "fact", "text": "bell\u0007 in the text"}),
        json.dumps({"kind": "fact", "text": "ok", "userId": "has space"}),
        json.dumps({"kind": "note", "text": "unknown kind"}),
        "",
        json.dumps({"kind": "message", "sourceMessageId": "x1", "text": "A message after the bad lines."}),
    ]
    with client(fresh) as api:
        result = api.post("/v1/bots/lines/import", content="\n".join(lines)).json()
        assert [e["line"] for e in result["errors"]] == [2, 3, 4, 5, 6]
        assert all(e["error"] for e in result["errors"])
        assert result["facts"]["created"] == 1 and result["messages"]["created"] == 1
        facts = [m["text"] for m in api.get("/v1/bots/lines/memories").json()["memories"]]
        assert facts == ["The piano was tuned in May."]
        assert api.post("/v1/bots/lines/import", content=b"\xff\xfe").status_code == 400
