"""engram.breaker: dependencies that hang fail fast."""

import httpx
import pytest

from engram.breaker import Breaker, guarded


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_closed_until_a_failure_then_open_for_the_pause_then_one_trial():
    clock = Clock()
    breaker = Breaker(pause_s=30, clock=clock)
    assert breaker.allows() and breaker.allows() and not breaker.open
    breaker.failed()
    assert breaker.open and not breaker.allows()
    clock.now += 29.9
    assert not breaker.allows()
    clock.now += 0.2
    assert breaker.allows()  # the trial
    assert not breaker.allows()  # the others wait for it
    breaker.succeeded()
    assert breaker.allows() and not breaker.open


def test_a_trial_that_fails_opens_it_for_another_pause():
    clock = Clock()
    breaker = Breaker(pause_s=10, clock=clock)
    breaker.failed()
    clock.now += 10
    assert breaker.allows()
    breaker.failed()
    clock.now += 9
    assert not breaker.allows()
    clock.now += 1
    assert breaker.allows()


def test_a_client_whose_dependency_timed_out_fails_at_once_until_the_pause_is_over():
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/hang":
            raise httpx.ReadTimeout("timed out", request=request)
        if request.url.path == "/refuse":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"ok": True})

    transport = guarded(httpx.MockTransport(answer), "Qdrant", pause_s=30)
    clock = Clock()
    transport.breaker.clock = clock
    client = httpx.Client(base_url="http://qdrant", transport=transport)
    with pytest.raises(httpx.ConnectError):
        client.get("/refuse")  # refused is quick already: it rests nothing
    assert client.get("/ok").json() == {"ok": True}
    with pytest.raises(httpx.ReadTimeout):
        client.get("/hang")
    with pytest.raises(httpx.ConnectError, match="Qdrant is resting"):
        client.get("/ok")  # not sent at all
    assert calls == ["/refuse", "/ok", "/hang"]
    clock.now += 30
    assert client.get("/ok").status_code == 200  # the trial, and it answered: closed
    assert client.get("/ok").status_code == 200 and not transport.breaker.open
