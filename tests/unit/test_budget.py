"""engram.proxy.budget: the breaker that spares LibreChat turns a memory that is too slow."""

from engram.proxy.budget import Breaker


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
