"""``gateway.heap``: the collector frozen out of the sessions' way, its pauses timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import heap
from gateway.metrics import Metrics


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is handed back to the collector afterwards, and its
    thresholds are restored."""
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def pauses(metrics: Metrics) -> dict[str, float]:
    """``duplex_gc_pause_seconds_count`` per generation."""
    return {s.labels["generation"]: s.value
            for family in text_string_to_metric_families(metrics.render().decode())
            for s in family.samples if s.name == "duplex_gc_pause_seconds_count"}


def test_settle_freezes_what_is_alive_and_collects_what_is_not(thawed: None) -> None:
    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle, garbage once dropped
    del a, b
    frozen = heap.settle()
    assert frozen == gc.get_freeze_count() > 1000  # this process's modules, at least
    assert not any(isinstance(o, Node) for o in gc.get_objects())  # collected, not frozen
    assert gc.collect() == 0  # nothing left for the next one to find either
    assert gc.get_threshold()[2] == heap.FULL_AFTER > 10


def test_pause_timer_times_each_generation_while_installed() -> None:
    metrics = Metrics()
    ticks = iter(range(100))
    timer = heap.PauseTimer(metrics.gc_pauses, clock=lambda: float(next(ticks)))
    timer.install()
    timer.install()  # once only
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        timer.remove()
    timer.remove()  # idempotent
    counts = pauses(metrics)
    assert counts["0"] >= 1 and counts["2"] >= 1
    gc.collect(2)
    assert pauses(metrics) == counts  # removed: no longer timed
    assert timer not in gc.callbacks
