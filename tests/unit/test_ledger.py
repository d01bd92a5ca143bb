"""Playback ledger (I6): what was generated, sent and heard."""

from __future__ import annotations

import pytest

from duplex.errors import InvalidRequest
from duplex.ledger import Mark, PlaybackLedger


def ledger(*chunks: tuple[float, str]) -> PlaybackLedger:
    lg = PlaybackLedger("resp_1", "item_1")
    for ms, text in chunks:
        lg.book(ms, text)
    return lg


THREE = ((100.0, "Hello "), (200.0, "there my "), (100.0, "friend."))  # 0-100, 100-300, 300-400


def test_book_appends_contiguous_marks() -> None:
    lg = ledger(*THREE)
    assert lg.marks == [Mark(0, 100, "Hello "), Mark(100, 300, "there my "),
                        Mark(300, 400, "friend.")]
    assert lg.generated_ms == 400.0
    assert lg.text == "Hello there my friend."


def test_empty_ledger() -> None:
    lg = ledger()
    assert lg.generated_ms == 0.0 and lg.text == "" and lg.text_heard() == ""
    assert lg.truncate(0) == 0.0
    with pytest.raises(InvalidRequest):
        lg.truncate(1)


def test_book_returns_the_mark() -> None:
    lg = ledger((50.0, "a "))
    assert lg.book(25.0, "b") == Mark(50.0, 75.0, "b")


@pytest.mark.parametrize(("marks", "sent"), [([10.0], 10.0), ([10.0, 30.0], 30.0),
                                             ([30.0, 10.0], 30.0), ([], 0.0)])
def test_mark_sent_is_monotonic(marks: list[float], sent: float) -> None:
    lg = ledger(*THREE)
    for m in marks:
        lg.mark_sent(m)
    assert lg.sent_ms == sent


@pytest.mark.parametrize(
    ("points", "heard"),
    [
        ([250.0], 250.0),
        ([400.0], 400.0),
        ([400.4], 400.0),  # within the half-millisecond tolerance: clamped
        ([0.0], 0.0),
        ([250.0, 300.0], 250.0),  # min wins: a later larger ack cannot undo a truncate
        ([300.0, 250.0], 250.0),
        ([100.0, 400.0, 50.0, 200.0], 50.0),
    ],
)
def test_truncate_clamp_and_min_wins(points: list[float], heard: float) -> None:
    lg = ledger(*THREE)
    result = None
    for p in points:
        result = lg.truncate(p)
    assert result == heard
    assert lg.heard_ms == heard


@pytest.mark.parametrize("bad", [-1.0, -0.001, 401.0, 10_000.0])
def test_truncate_errors(bad: float) -> None:
    lg = ledger(*THREE)
    with pytest.raises(InvalidRequest) as info:
        lg.truncate(bad)
    assert info.value.code == "invalid_value"
    assert info.value.param == "audio_end_ms"
    assert lg.heard_ms is None  # a refused truncate changes nothing


def test_truncate_error_keeps_previous_heard() -> None:
    lg = ledger(*THREE)
    lg.truncate(200.0)
    with pytest.raises(InvalidRequest):
        lg.truncate(-5)
    assert lg.heard_ms == 200.0


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (0.0, ""),
        (100.0, "Hello "),  # exactly at a mark's end: the whole mark
        (99.9, ""),  # just before the end: the cut stops before the space → nothing of it
        (300.0, "Hello there my "),
        (400.0, "Hello there my friend."),
        (1000.0, "Hello there my friend."),
        # mid-mark: 150 ms is 25 % into "there my " (9 chars) → "th" → no word complete
        (150.0, "Hello "),
        # 250 ms is 75 % → "there " (6 chars) → ends on a word boundary
        (250.0, "Hello there "),
        # 290 ms is 95 % → "there my" → cut back to the last space
        (290.0, "Hello there "),
        (350.0, "Hello there my "),  # "friend." half-heard: no space, nothing of it
    ],
)
def test_text_heard(limit: float, text: str) -> None:
    lg = ledger(*THREE)
    assert lg.text_heard(limit) == text


def test_text_heard_uses_heard_ms_and_defaults_to_everything() -> None:
    lg = ledger(*THREE)
    assert lg.text_heard() == lg.text  # nothing truncated yet
    lg.truncate(300.0)
    assert lg.text_heard() == "Hello there my "
    assert lg.text_heard(100.0) == "Hello "  # an explicit limit wins


def test_text_heard_zero_length_marks() -> None:
    lg = ledger((100.0, "One "), (0.0, "two "), (100.0, "three"))
    assert lg.text_heard(100.0) == "One two "  # zero-length mark at the limit is heard
    assert lg.text_heard(99.0) == ""


def test_text_heard_is_a_prefix_and_monotonic() -> None:
    lg = ledger((120.0, "The quick brown "), (80.0, "fox jumps "), (200.0, "over the lazy dog."))
    previous = ""
    for ms in range(0, 401, 5):
        heard = lg.text_heard(float(ms))
        assert lg.text.startswith(heard)
        assert len(heard) >= len(previous)
        previous = heard
    assert previous == lg.text
