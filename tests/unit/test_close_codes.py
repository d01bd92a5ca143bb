"""Close codes and reasons (duplex/close_codes.py): any text becomes a reason a close
frame can carry, and the rate-limited warnings (gateway/log_limits.py)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duplex.close_codes import MAX_REASON_BYTES, CloseCode, close_reason, meaning, sendable
from gateway.log_limits import LogLimiter


def test_short_reasons_are_kept() -> None:
    assert close_reason("") == ""
    assert close_reason("session.replaced") == "session.replaced"
    assert close_reason("x" * MAX_REASON_BYTES) == "x" * MAX_REASON_BYTES


def test_long_reasons_are_cut_on_a_character_boundary() -> None:
    cut = close_reason("€" * 100)  # 300 bytes; 120 chars used to be sent as 360 bytes
    assert len(cut.encode()) <= MAX_REASON_BYTES
    assert cut == "€" * 40 + "…"
    assert close_reason("x" * (MAX_REASON_BYTES + 1)) == "x" * 120 + "…"


def test_lone_surrogates_are_replaced() -> None:
    assert close_reason("bad \ud800 id") == "bad ? id"


@given(st.text(st.characters(codec=None, categories=None), max_size=300))
def test_any_text_is_a_valid_reason(text: str) -> None:
    assert len(close_reason(text).encode("utf-8")) <= MAX_REASON_BYTES


def test_every_code_we_send_may_be_sent() -> None:
    assert all(sendable(code) for code in CloseCode if code is not CloseCode.ABNORMAL)
    assert not sendable(CloseCode.ABNORMAL) and not sendable(1005) and not sendable(1015)


def test_every_close_code_is_explained_in_one_table() -> None:
    explained = {code: meaning(code) for code in CloseCode}
    assert len(set(explained.values())) == len(CloseCode), explained  # each its own words
    assert "restarting" in meaning(1012) and "resume" in meaning(1012)
    assert meaning(4999) == "not a code this gateway sends"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_log_limiter_lets_one_warning_a_window_through_with_a_count(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limiter = LogLimiter(logging.getLogger("test.limits"), every_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, "test.limits"):
        assert limiter.warning("junk", "ignored %s", "a")
        assert not any(limiter.warning("junk", "ignored %s", "b") for _ in range(41))
        assert limiter.warning("other", "another kind")  # kinds are counted apart
        clock.now += 10.0
        assert limiter.warning("junk", "ignored %s", "c")
        limiter.warning("junk", "ignored %s", "d")
        limiter.flush()
        limiter.flush()  # said once
    assert [r.getMessage() for r in caplog.records] == [
        "ignored a", "another kind",
        "ignored c (41 more like it since the last, within 10 s)",
        "1 more junk warnings in the last 10 s"]
