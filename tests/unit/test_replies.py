"""Reply audio in chunks of at most 200 ms, each with its share of the words; and
each reply timed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.session.replies import ReplyTimings, reply_chunks, words

RATE = 22050


@settings(max_examples=200, deadline=None, database=None)
@given(samples=st.integers(0, RATE * 3), text=st.text(alphabet=" ab.,\n", max_size=60))
def test_chunks_are_short_and_keep_every_sample_and_word(samples: int, text: str) -> None:
    pcm = np.arange(samples, dtype=np.int16)
    chunks = list(reply_chunks(pcm, RATE, text))
    assert all(len(c) <= RATE // 5 for c, _ in chunks)
    assert np.array_equal(np.concatenate([c for c, _ in chunks]), pcm)
    assert "".join(t for _, t in chunks) == text


def test_words_spread_over_the_chunks_in_order() -> None:
    pcm = np.zeros(RATE, dtype=np.int16)  # one second: five chunks
    chunks = [t for _, t in reply_chunks(pcm, RATE, " The capital is Paris. ")]
    assert len(chunks) == 5
    assert chunks == ["", " The", " capital", " is", " Paris. "]
    assert [t for _, t in reply_chunks(pcm[:100], RATE, "Hi.")] == ["Hi."]


def test_text_streams_a_word_a_delta() -> None:
    assert words(" The capital, Paris.\n") == [" The", " capital,", " Paris.\n"]
    assert words("") == [""] and words("  ") == ["  "]


def test_reply_timings_run_from_the_turns_end_and_stamp_response_done() -> None:
    now = [100.0]
    timings = ReplyTimings(lambda: now[0])
    assert timings.mark("transcribe") is None  # not started: nothing is timed
    timings.start()
    now[0] = 100.25
    assert timings.mark("transcribe") == 0.25
    timings.stage("think_first_output", 0.1)
    now[0] = 100.5
    assert timings.first_audio() == 0.5
    assert timings.mark("late") is None  # stopped at the first audio
    done = timings.stamp({"type": "response.done", "response": {}})
    assert done["timings_ms"] == {"transcribe": 250.0, "think_first_output": 100.0,
                                  "first_audio": 500.0}
    assert "timings_ms" not in timings.stamp({"type": "response.done"})  # said once
    assert timings.stamp({"type": "error"}) == {"type": "error"}
