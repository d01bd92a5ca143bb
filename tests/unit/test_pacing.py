"""Output pacing: reply audio is released at most ``lead_ms`` ahead of real time."""

from __future__ import annotations

import pytest

from duplex.pacing import Pacer


def test_fresh_pacer_releases_at_once() -> None:
    p = Pacer(lead_ms=200.0)
    assert p.due("t1", 5.0) == 5.0
    assert p.anchor is None and p.key is None


@pytest.mark.parametrize(
    ("released_ms", "now", "due"),
    [
        (100.0, 0.0, 0.0),  # under the lead: due at once (the anchor)
        (200.0, 0.0, 0.0),  # exactly the lead
        (300.0, 0.0, 0.1),  # 100 ms over the lead: wait 100 ms
        (1000.0, 0.0, 0.8),
        (1000.0, 0.5, 0.8),  # the clock moved, the due time did not
        (1000.0, 1.0, 0.8),  # playback is exactly at the end: not dry yet
    ],
)
def test_due_for_lead(released_ms: float, now: float, due: float) -> None:
    p = Pacer(lead_ms=200.0)
    p.released("t1", 0.0, released_ms)
    assert p.due("t1", now) == pytest.approx(due)


def test_chunks_accumulate_from_the_anchor() -> None:
    p = Pacer(lead_ms=100.0)
    t = 10.0
    for _ in range(10):  # 10 × 40 ms released "instantly"
        t = max(t, p.due("t1", t))
        p.released("t1", t, 40.0)
    assert p.anchor == 10.0
    assert p.released_ms == 400.0
    assert p.due("t1", 10.0) == pytest.approx(10.3)


def test_a_new_key_restarts_the_clock() -> None:
    p = Pacer(lead_ms=100.0)
    p.released("t1", 0.0, 1000.0)
    assert p.due("t1", 0.0) == pytest.approx(0.9)
    assert p.due("t2", 0.0) == 0.0  # a new response does not wait for the old one
    p.released("t2", 0.5, 40.0)
    assert (p.key, p.anchor, p.released_ms) == ("t2", 0.5, 40.0)
    assert p.due("t1", 0.6) == 0.6  # the old key's clock is gone


def test_reanchors_when_generation_fell_behind() -> None:
    p = Pacer(lead_ms=100.0)
    p.released("t1", 0.0, 200.0)  # plays until 0.2
    assert p.due("t1", 1.0) == 1.0  # dry since 0.2: nothing to wait for
    p.released("t1", 1.0, 300.0)
    # re-anchored: the client plays the 200 ms already released as "done" at 1.0
    assert p.anchor == pytest.approx(0.8)
    assert p.released_ms == 500.0
    assert p.due("t1", 1.0) == pytest.approx(1.2)  # 300 ms buffered, 100 ms lead


def test_no_reanchor_while_client_still_has_audio() -> None:
    p = Pacer(lead_ms=100.0)
    p.released("t1", 0.0, 500.0)
    p.released("t1", 0.3, 100.0)
    assert p.anchor == 0.0
    assert p.due("t1", 0.3) == pytest.approx(0.5)


def test_reset() -> None:
    p = Pacer(lead_ms=100.0)
    p.released("t1", 0.0, 1000.0)
    p.reset()
    assert (p.key, p.anchor, p.released_ms) == (None, None, 0.0)
    assert p.due("t1", 0.0) == 0.0
