"""``/healthz``'s rule: unhealthy only once the store has been unreachable longer than
the bound, counted from the last answer (or the start, if it never answered)."""

from __future__ import annotations

from duplex.store import RedisSessionStore, connect
from gateway.store_watch import StoreWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch(clock: Clock) -> StoreWatch:
    store = RedisSessionStore(connect("unix:///nonexistent"))  # lazy: never connects here
    return StoreWatch(store, 1.0, clock=clock)


def test_down_is_counted_from_the_start_until_the_store_answers() -> None:
    clock = Clock()
    w = watch(clock)
    assert w.down_for() == 0.0 and w.unhealthy(30.0) == ""
    assert not w.answered_within(1e9)  # not once yet: no fresh answer to trust
    clock.now += 30.0
    assert w.unhealthy(30.0) == ""  # at the bound: not yet
    clock.now += 0.5
    assert w.unhealthy(30.0) == "store unreachable for 30.5 s (more than 30 s)"
    w.answered()
    assert w.down_for() == 0.0 and w.unhealthy(30.0) == ""
    clock.now += 1.5
    assert w.answered_within(2.0) and not w.answered_within(1.5)
    clock.now += 43.5
    assert w.down_for() == 45.0
    assert w.unhealthy(2.5) == "store unreachable for 45.0 s (more than 2.5 s)"


def test_a_bound_of_zero_never_fails_healthz() -> None:
    clock = Clock()
    w = watch(clock)
    clock.now += 1e6
    assert w.unhealthy(0.0) == ""


def test_the_store_is_full_at_nine_tenths_of_its_maxmemory() -> None:
    w = watch(Clock())
    assert not w.full()  # not read yet
    w.measured(899, 1000)
    assert not w.full()
    w.measured(900, 1000)
    assert w.full()
    w.measured(10**9, 0)  # no maxmemory: never full
    assert not w.full()
