"""The proxy's parts on their own: wire formats, blocks, extraction parsing, scoping, project lookup."""

import json
import re

import httpx
import pytest
from pydantic import ValidationError

from engram.clock import now_ms
from engram.config import Settings
from engram.config.proxy import ProxySettings
from engram.jobs import ExtractJob
from engram.proxy.extract import ExtractionParts, Extractor
from engram.proxy.memory import ChatMemory, Turn
from engram.proxy.projects import ProjectResolver
from engram.vectors import Scope
from tests.fake_upstream import TEMPERATURE_REFUSED
from tests.support import wait_until


def test_an_unrelated_turn_is_told_no_memories_and_a_related_one_is(stack, monkeypatch):
    """Recall's default floor (MEMORY_RECALL_MIN_SCORE, 0.4), with the real model: a request that has nothing
    to do with what the user said injects nothing; one that does is told it."""
    monkeypatch.delenv("MEMORY_RECALL_MIN_SCORE", raising=False)
    chat = ChatMemory(Settings().proxy, stack.engine.service, ProjectResolver(None), stack.engine.state)
    turn = Turn("u-floor", "c", None, authorized=True)
    for text in (
        "The user drinks green tea.",
        "The user's dog is called Biscuit.",
        "The user lives in Lyon.",
    ):
        chat.save(turn, text)
    scope = Scope(bot=chat.bot, kind="fact", user="u-floor")
    assert wait_until(lambda: stack.engine.service.recall(scope, "tea", 3).meaning, timeout_s=30)
    for unrelated in (
        "Can you help me write a python function that reverses a list?",
        "What is the capital of Peru?",
        "quantum physics lecture",
    ):
        chat.forget_caches()
        assert chat.context(turn, unrelated) == ("", 0), unrelated
    block, found = chat.context(turn, "What's my favourite beverage?")
    assert found >= 1 and "green tea" in block and "Biscuit" not in block


def test_a_turn_asking_about_a_day_is_told_that_day_s_memories_over_the_floor(stack, monkeypatch):
    """A turn asking "what did we decide yesterday?", with the real model and the default floor (0.4):
    yesterday's memory shares one word of the question at most, and is told; one of four days ago is not."""
    monkeypatch.delenv("MEMORY_RECALL_MIN_SCORE", raising=False)
    service = stack.engine.service
    chat = ChatMemory(Settings().proxy, service, ProjectResolver(None), stack.engine.state)
    turn = Turn("u-day", "c", None, authorized=True)
    day = 86_400_000
    service.add_fact(chat.bot, "The launch moves to March.", user="u-day", created_at=now_ms() - day)
    service.add_fact(chat.bot, "The logo will be blue.", user="u-day", created_at=now_ms() - 4 * day)
    scope = Scope(bot=chat.bot, kind="fact", user="u-day")
    assert wait_until(lambda: service.recall(scope, "launch", 2).meaning, timeout_s=30)
    block, found = chat.context(turn, "What did we decide yesterday?")
    assert found == 1 and "March" in block and "blue" not in block, block


@pytest.mark.parametrize("mode", ["relevant", "newest", "both"])
def test_recall_modes_from_the_environment(engine, monkeypatch, mode):
    monkeypatch.setenv("MEMORY_RECALL_MODE", mode)
    monkeypatch.setenv("MEMORY_RECALL_LIMIT", "2")
    chat = ChatMemory(Settings().proxy, engine.service, ProjectResolver(None), engine.state)
    turn = Turn(f"u-{mode}", "c", None, authorized=True)
    for text in (
        "The user's dog is called Biscuit.",
        "The user lives in Lyon.",
        "The user plays the oboe.",
        "The user is allergic to peanuts.",
    ):
        chat.save(turn, text)
    block, found = chat.context(turn, "What is my dog's name?")
    texts = {"dog": "Biscuit" in block, "newest": "peanuts" in block and "oboe" in block}
    assert (
        texts
        == {
            "relevant": {"dog": True, "newest": False},
            "newest": {"dog": False, "newest": True},
            "both": {"dog": True, "newest": True},
        }[mode]
    )
    assert len(block) <= chat.settings.max_context_chars and found == len(set(re.findall(r"mem:\d+", block)))
    with pytest.raises(ValidationError):
        ProxySettings(MEMORY_RECALL_MODE="everything")


def test_projectless_off_and_precedence(engine):
    memory = ChatMemory(
        ProxySettings(MEMORY_PROJECTLESS="off"), engine.service, ProjectResolver(None), engine.state
    )
    assert memory.enabled(Turn("u", "c", None)) == (
        False,
        "memory is off in chats outside a project (MEMORY_PROJECTLESS=off)",
    )
    memory = ChatMemory(
        ProxySettings(MEMORY_DEFAULT_ENABLED="false"), engine.service, ProjectResolver(None), engine.state
    )
    turn = Turn("u", "c", None, authorized=True)
    assert memory.enabled(turn) == (False, "the server default")
    memory.set_enabled(turn, True, for_chat=False)
    assert memory.enabled(turn) == (True, "your default")
    memory.set_enabled(turn, False)
    assert memory.enabled(turn) == (False, "this chat's setting")
    assert memory.enabled(Turn("u", "other", None)) == (True, "your default")
    memory.set_enabled(turn, None)
    assert memory.enabled(turn) == (True, "your default")


def test_extractor_stores_drops_secrets_caps_and_dedupes(engine):
    settings = ProxySettings(
        EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="small", MEMORY_MAX_PER_TURN="2"
    )
    seen = []
    answer = json.dumps(
        {
            "memories": [
                "The user's wifi password is hunter2.",
                "The user drinks sencha.",
                "The user likes hiking.",
            ]
        }
    )
    extractor = Extractor(settings, parts(engine), extraction_server([answer], seen))
    assert extractor.run(job()) == ["The user drinks sencha."]  # secret dropped; the cap counts it
    assert seen[0]["model"] == "small" and "long-term memory" in seen[0]["messages"][0]["content"]
    again = Extractor(
        settings,
        parts(engine),
        extraction_server([json.dumps({"memories": ["The user drinks sencha!"]})], []),
    )
    assert again.run(job()) == []  # already known


def test_extractor_retries_once_then_drops(engine, caplog):
    settings = ProxySettings(EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="small")
    seen = []
    extractor = Extractor(
        settings,
        parts(engine),
        extraction_server(["I am not JSON", "Still not JSON"], seen),
    )
    assert extractor.run(job()) == [] and len(seen) == 2
    assert "not JSON even after a retry" in caplog.text
    seen2 = []
    fixed = Extractor(
        settings,
        parts(engine),
        extraction_server(["nope", '{"memories": ["The user drinks sencha."]}'], seen2),
    )
    assert fixed.run(job()) == ["The user drinks sencha."] and len(seen2) == 2


def test_extractor_never_spends_a_callers_key(engine):
    settings = ProxySettings(UPSTREAMS='[{"name": "byo", "baseUrl": "http://up"}]')
    seen = []
    extractor = Extractor(
        settings,
        parts(engine),
        extraction_server(['{"memories": ["x"]}'], seen),
    )
    assert (
        extractor.run(
            ExtractJob(
                bot="librechat", user="u", conversation="c", upstream="byo", model="m", user_text="My x is y"
            )
        )
        == []
    )
    assert seen == []


def test_explicit_mode_stores_only_what_was_asked(engine):
    extractor = Extractor(
        ProxySettings(),
        parts(engine),
        httpx.MockTransport(lambda r: httpx.Response(500)),
    )
    stored = extractor.run(
        ExtractJob(
            bot="librechat",
            user="u",
            conversation="c",
            mode="explicit",
            user_text="Remember that the boiler was serviced in May",
        )
    )
    assert stored == ["the boiler was serviced in May."]


def test_reasoning_models_are_asked_without_a_temperature_and_a_refusal_is_asked_again(engine):
    facts = ["The user drinks sencha.", "The user drinks flat whites."]

    def refusing(request):
        body = json.loads(request.content)
        seen.append(body)
        if "temperature" in body:
            return httpx.Response(400, json=TEMPERATURE_REFUSED)
        answer = json.dumps({"memories": [facts.pop(0)]})
        return httpx.Response(200, json={"choices": [{"message": {"content": answer}}]})

    seen: list[dict] = []
    o_series = ProxySettings(EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="o3-mini")
    extractor = Extractor(o_series, parts(engine), httpx.MockTransport(refusing))
    assert extractor.run(job()) == ["The user drinks sencha."]
    assert len(seen) == 1 and "temperature" not in seen[0]  # known: never sent, nothing refused
    seen.clear()
    unknown = ProxySettings(EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="house-reasoner")
    extractor = Extractor(unknown, parts(engine), httpx.MockTransport(refusing))
    assert extractor.run(job("My coffee is a flat white")) == ["The user drinks flat whites."]
    assert [("temperature" in body) for body in seen] == [True, False]
    assert extractor.retried_without == {"temperature": 1}
    assert not engine.state.marks.extraction("librechat").failing


def test_a_failing_extraction_is_noted_for_memory_status(engine):
    broken = Extractor(
        ProxySettings(EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="small"),
        parts(engine),
        httpx.MockTransport(lambda r: httpx.Response(503)),
    )
    assert broken.run(job()) == []
    health = engine.state.marks.extraction("librechat")
    assert health.failing and health.why == "the model answered HTTP 503"


def parts(engine) -> ExtractionParts:
    return ExtractionParts(engine.service, engine.state, engine.queue)


def extraction_server(answers, seen):
    def handle(request):
        seen.append(json.loads(request.content))
        return httpx.Response(
            200, json={"choices": [{"message": {"content": answers[min(len(seen), len(answers)) - 1]}}]}
        )

    return httpx.MockTransport(handle)


def job(text="My tea is sencha"):
    return ExtractJob(bot="librechat", user="u1", conversation="c", user_text=text, assistant_text="Nice.")


def test_a_turn_that_changes_a_known_fact_rewrites_it_and_keeps_the_old_in_its_history(engine):
    """Issue 45: "I moved from Berlin to Munich" with a model that answers an update for the Berlin fact it
    was shown leaves one fact, Munich, with Berlin in its history; ids it was not shown are ignored."""
    service = engine.service
    berlin, _ = service.add_fact("librechat", "The user lives in Berlin.", user="u1")
    service.add_fact("librechat", "The user likes techno.", user="u1")
    others, _ = service.add_fact("librechat", "The user lives in Berlin too.", user="u2")
    seen = []

    def handle(request):
        body = json.loads(request.content)
        seen.append(body)
        shown = dict(re.findall(r"- (mem:\d+): (.+)", body["messages"][-1]["content"]))
        moved = next(i for i, t in shown.items() if "Berlin" in t)
        answer = {
            "memories": [],
            "updates": [{"id": moved, "text": "The user lives in Munich."}],
            "deletes": [f"mem:{others.id}"],  # another user's fact, never shown: ignored
        }
        return httpx.Response(200, json={"choices": [{"message": {"content": json.dumps(answer)}}]})

    settings = ProxySettings(EXTRACT_BASE_URL="http://extract/v1", EXTRACT_MODEL="small")
    extractor = Extractor(settings, parts(engine), httpx.MockTransport(handle))
    assert extractor.run(job("I moved from Berlin to Munich last month")) == []
    assert f"mem:{berlin.id}: The user lives in Berlin." in seen[0]["messages"][-1]["content"]
    facts = [m.text for m in service.list("librechat", user="u1")]
    assert sorted(facts) == ["The user likes techno.", "The user lives in Munich."]
    assert [(v.text, v.by) for v in service.history("librechat", berlin.id)] == [
        ("The user lives in Berlin.", "extraction")
    ]
    recalled = service.recall(Scope(bot="librechat", kind="fact", user="u1"), "where does the user live", 5)
    assert "The user lives in Berlin." not in [m.text for m in recalled]  # only its history has it
    assert service.get("librechat", others.id).text == "The user lives in Berlin too."
