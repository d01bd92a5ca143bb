"""Reply audio in chunks of at most 200 ms, each with its share of the words; and
each reply timed."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.metrics import Metrics
from gateway.session.replies import ReplyTimings, reply_chunks, words
from gateway.session.turn_split import TurnSplit
from plugins.base import FIRST_TOKEN, ReplyStep, Transcript

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
    heard = Transcript("item_1", "hello")
    assert timings.arrived([heard]) == [heard]  # timed as it arrives, and acted on
    now[0] = 100.3
    assert timings.arrived([ReplyStep(1, FIRST_TOKEN)]) == []  # a step is only a time
    now[0] = 100.4
    assert timings.mark("speak_first_output") == pytest.approx(0.4)
    now[0] = 100.5
    split = timings.first_audio()
    assert split is not None and split.first_audio_ms == 500.0
    assert timings.mark("late") is None  # stopped at the first audio
    done = timings.stamp({"type": "response.done", "response": {}})
    # every step from the turn's end (the reply's start), as the spans draw them
    assert done["timings_ms"] == {"transcribe": 250.0, "first_token": 300.0,
                                  "speak_first_output": 400.0, "first_audio": 500.0}
    assert "timings_ms" not in timings.stamp({"type": "response.done"})  # said once
    assert timings.stamp({"type": "error"}) == {"type": "error"}


def test_a_vad_ended_turn_carries_the_detectors_wait_in_its_split() -> None:
    now = [10.0]
    timings = ReplyTimings(lambda: now[0])
    timings.turn_detected(500.0)  # no reply started: not this reply's
    timings.start()
    timings.turn_detected(480.0)
    timings.turn_detected(999.0)  # the first detection is the turn's
    now[0] = 10.1
    timings.mark("transcribe")
    now[0] = 10.3
    split = timings.first_audio()
    assert split is not None
    assert split.turn_detection_ms == 480.0
    assert dict(split.steps) == {"transcribe": pytest.approx(100.0)}
    assert split.first_audio_ms == pytest.approx(300.0)
    assert split.heard_to_sent_ms == pytest.approx(780.0)
    assert split.phases() == pytest.approx(
        {"turn_detection": 0.48, "transcribe": 0.1, "first_audio": 0.3})
    done = timings.stamp({"type": "response.done"})
    assert list(done["timings_ms"]) == ["turn_detection", "transcribe", "first_audio"]
    timings.start()  # a response.create: no turn detection in its split
    split = timings.first_audio()
    assert split is not None and split.heard_to_sent_ms is None
    assert "turn_detection" not in split.phases()


def test_metrics_take_a_split_per_phase() -> None:
    metrics = Metrics()
    metrics.observe_turn(TurnSplit(300.0, 480.0, MappingProxyType({"transcribe": 100.0})))
    metrics.observe_turn(TurnSplit(200.0))
    text = metrics.render().decode()
    assert 'duplex_turn_phase_seconds_count{phase="turn_detection"} 1.0' in text
    assert 'duplex_turn_phase_seconds_count{phase="first_audio"} 2.0' in text
    assert "duplex_end_of_speech_to_first_audio_seconds_count 1.0" in text
    assert "duplex_first_audio_seconds_count 2.0" in text
    metrics.observe_playback_mark(0.9)
    text = metrics.render().decode()
    assert 'duplex_turn_phase_seconds_count{phase="playback_mark"} 1.0' in text
