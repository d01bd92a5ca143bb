"""Stage 0 of the cascade: gather a user turn's audio, transcribe it on commit.

The speech recognizer, ``WhisperAsr``, and its models are in
``plugins.cascade.asr``.

``ListenerModel`` is the ``StageModel``: ``AudioUnit`` appends (keeping the
last 30 s), ``DiscardAudio`` forgets, ``CommitAudio`` transcribes and yields one
``UserTurn``, and a ``Relay`` is passed on to the thinker in its place (I9).

Drafts (``AudioUnit.drafts``: the turn will be answered as soon as it ends):
at a pause of ``DRAFT_PAUSE_MS`` after enough speech, the audio so far is
transcribed and its words go to the thinker as a ``Draft``, so the thinker
can start on the reply while the turn detector still waits for the silence
window to close; when the turn is committed with no speech after that pause,
the draft's words are its transcript (no second transcription), and the
thinker's guess is the reply. Speech after the pause makes the draft stale:
the next pause drafts again, and the commit transcribes afresh.

A draft (and its withdrawal, ``Draft("")``) is also ``visible``: the plugin
projects it as ``plugins.base.WordsHeard``, which the session hands its VAD,
so the turn detector judges the words so far (``plugins.turn_end``: a
finished question ends the turn sooner, a dangling one waits). A warm draft
is not: the user is still speaking.

Each turn's words come with the recognizer's score (``plugins.cascade.heard``):
a turn scored below ``unsure_below`` is marked ``unsure`` (so is a draft, so
its guess is the reply the commit asks for), and the thinker asks the user to
say it again instead of acting on it.

Before the model runs, the silence around the speech is cut
away by frame energy (the buffer holds everything since the last commit,
pauses included), and a turn with less than 250 ms between its first and last
loud frame is not transcribed at all (Whisper makes words of clicks): its text
is "".
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from duplex import effects as fx
from duplex.fence import Fence
from engines.model_http import ModelServerError
from engines.stages import StageResult
from plugins.base import AudioUnit, Pcm
from plugins.cascade.asr import MAX_TURN_S, RATE
from plugins.cascade.asr import WhisperAsr as WhisperAsr  # re-exported: it lived here
from plugins.cascade.heard import UNSURE_BELOW, Heard, is_unsure
from plugins.cascade.payloads import Draft, UserTurn
from plugins.listen_think_speak import Relay, relay

MIN_SPEECH_MS = 250

# Trimming silence: 20 ms frames; a frame is loud when its RMS reaches
# peak − 35 dB, bounded to [-55, -40] dBFS; keep 300 ms around the loud part.
TRIM_FRAME_MS = 20
TRIM_BELOW_PEAK_DB = 35.0
TRIM_FLOOR_DBFS, TRIM_CEIL_DBFS = -55.0, -40.0
# Whisper tiny mishears the last word when the audio ends close after it
# ("capital of friends"), so only leading silence is cut, down to this much.
TRIM_PAD_MS = 800
TAIL_SILENCE_MS = 1000
log = logging.getLogger(__name__)

# A pause this long after speech drafts the turn (the VAD's window is 500 ms by
# default: the thinker gets the difference, less one transcription, as a head start).
# Measured with bench/voice_quiz.py --quick, back to back: 100 ms gave
# speech_stopped → first audio p50 615 ms, 200 ms gave 843 ms.
DRAFT_PAUSE_MS = 100
# While the user speaks, the words so far are heard this often (after at least
# WARM_AFTER_MS of speech) so the thinker can prefill the turn's start: the CPU
# is idle while the user talks, and each token prefilled then is ~15–20 ms
# less after the turn ends (Qwen2.5 1.5B, 2 threads).
WARM_EVERY_MS = 1000
WARM_AFTER_MS = 600


# -- trimming --------------------------------------------------------------------


def speech_span(pcm: Pcm, rate: int = RATE) -> tuple[int, int] | None:
    """Sample range ``[start, end)`` from the first to the last loud 20 ms frame;
    None when no frame is loud."""
    frame = rate * TRIM_FRAME_MS // 1000
    n = pcm.size // frame
    if n == 0:
        return None
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame) / 32768.0
    level_db = 10.0 * np.log10(np.mean(x * x, axis=1) + 1e-12)
    threshold = min(max(float(level_db.max()) - TRIM_BELOW_PEAK_DB, TRIM_FLOOR_DBFS),
                    TRIM_CEIL_DBFS)
    loud = np.flatnonzero(level_db >= threshold)
    if loud.size == 0:
        return None
    return int(loud[0]) * frame, (int(loud[-1]) + 1) * frame


def utterance(pcm: Pcm, rate: int = RATE) -> Pcm | None:
    """The speech of a turn from ``TRIM_PAD_MS`` before it to the end of the
    turn's audio (the VAD's trailing silence is short); None when there is less
    than ``MIN_SPEECH_MS`` of speech (nothing worth transcribing)."""
    span = speech_span(pcm, rate)
    if span is None or (span[1] - span[0]) * 1000 < MIN_SPEECH_MS * rate:
        return None
    pad = rate * TRIM_PAD_MS // 1000
    return pcm[max(0, span[0] - pad):]


def frames_of(pcm: Pcm, carried: int) -> Iterator[Pcm]:
    """``pcm`` in pieces that each end a ``TRIM_FRAME_MS`` frame (the first
    completes the ``carried`` samples of one begun before), the rest last."""
    frame = RATE * TRIM_FRAME_MS // 1000
    start = 0
    for end in range((frame - carried) % frame or frame, pcm.size + 1, frame):
        yield pcm[start:end]
        start = end
    if start < pcm.size:
        yield pcm[start:]


# -- the stage -------------------------------------------------------------------


@dataclass(slots=True)
class Loudness:
    """Where the speech of the audio so far is, frame by frame (``TRIM_FRAME_MS``),
    with the loudness rule of ``speech_span`` against the peak so far."""

    frames: int = 0  # frames seen
    peak_db: float = -math.inf
    first_loud: int = -1  # frame index; -1: none yet
    last_loud: int = -1
    carry: Pcm = field(default_factory=lambda: np.zeros(0, dtype=np.int16))

    def add(self, pcm: Pcm) -> None:
        frame = RATE * TRIM_FRAME_MS // 1000
        pcm = np.concatenate([self.carry, pcm]) if self.carry.size else pcm
        n = pcm.size // frame
        self.carry = pcm[n * frame:]
        if n == 0:
            return
        x = pcm[: n * frame].astype(np.float32).reshape(n, frame) / np.float32(32768.0)
        level_db = 10.0 * np.log10(np.vecdot(x, x) / frame + 1e-12)
        self.peak_db = max(self.peak_db, float(level_db.max()))
        threshold = min(max(self.peak_db - TRIM_BELOW_PEAK_DB, TRIM_FLOOR_DBFS), TRIM_CEIL_DBFS)
        loud = np.flatnonzero(level_db >= threshold)
        if loud.size:
            if self.first_loud < 0:
                self.first_loud = self.frames + int(loud[0])
            self.last_loud = self.frames + int(loud[-1])
        self.frames += n

    def paused_after_speech(self, pause_ms: int) -> bool:
        """``pause_ms`` of quiet after at least ``MIN_SPEECH_MS`` of speech."""
        if self.first_loud < 0:
            return False
        speech_ms = (self.last_loud - self.first_loud + 1) * TRIM_FRAME_MS
        quiet_ms = (self.frames - 1 - self.last_loud) * TRIM_FRAME_MS
        return speech_ms >= MIN_SPEECH_MS and quiet_ms >= pause_ms


@dataclass(frozen=True, slots=True)
class _Drafted:
    last_loud: int  # the speech it heard ended at this frame
    heard: Heard | None  # None: its transcription failed, and the commit transcribes afresh


@dataclass(slots=True)
class ListenState:
    """The uncommitted audio of one request (at most ``MAX_TURN_S``), where its
    speech is, and the latest draft of its words."""

    chunks: deque[Pcm] = field(default_factory=deque)
    samples: int = 0
    loudness: Loudness = field(default_factory=Loudness)
    drafted: _Drafted | None = None
    warmed_at: int = 0  # frame of the latest warm draft

    def append(self, pcm: Pcm) -> None:
        if pcm.size == 0:
            return
        pcm = pcm.astype(np.int16, copy=False)
        self.chunks.append(pcm)
        self.samples += pcm.size
        self.loudness.add(pcm)
        limit = MAX_TURN_S * RATE
        while self.samples - self.chunks[0].size >= limit:
            self.samples -= self.chunks.popleft().size

    def audio(self) -> Pcm:
        """All of it (the last ``MAX_TURN_S``)."""
        pcm = (np.concatenate(list(self.chunks)) if self.chunks
               else np.zeros(0, dtype=np.int16))
        return pcm[-MAX_TURN_S * RATE :]

    def draft_due(self, pause_ms: int) -> bool:
        """A pause after speech that no draft has heard yet."""
        heard = self.drafted.last_loud if self.drafted is not None else -1
        return self.loudness.paused_after_speech(pause_ms) and self.loudness.last_loud != heard

    def warm_due(self, every_ms: int) -> bool:
        """Speech going on for ``every_ms`` since the latest warm draft."""
        loud = self.loudness
        frames = every_ms // TRIM_FRAME_MS
        return (loud.first_loud >= 0 and loud.last_loud == loud.frames - 1
                and (loud.last_loud - loud.first_loud) * TRIM_FRAME_MS >= WARM_AFTER_MS
                and loud.frames - max(self.warmed_at, loud.first_loud) >= frames)

    def draft_overtaken(self) -> bool:
        """Speech came after the latest draft, which the thinker still holds."""
        drafted = self.drafted
        return (drafted is not None and drafted.heard is not None and bool(drafted.heard.text)
                and drafted.last_loud != self.loudness.last_loud)

    def draft_heard(self) -> Heard | None:
        """The latest draft's words, if no speech came after it."""
        drafted = self.drafted
        if drafted is None or drafted.last_loud != self.loudness.last_loud:
            return None
        return drafted.heard

    def take(self) -> Pcm:
        """All of it, leaving the state empty."""
        pcm = self.audio()
        self.clear()
        return pcm

    def clear(self) -> None:
        self.chunks.clear()
        self.samples = 0
        self.loudness = Loudness()
        self.drafted = None
        self.warmed_at = 0


class Transcriber(Protocol):
    """What the listener needs of a speech recognizer: ``WhisperAsr`` here, or
    ``remote_asr.RemoteAsr`` on a server apart."""

    def transcribe(self, pcm16k: Pcm) -> str: ...


@runtime_checkable
class ScoringTranscriber(Transcriber, Protocol):
    """A recognizer that also scores its words (``WhisperAsr``); the listener
    takes any other at its word."""

    def hear(self, pcm16k: Pcm) -> Heard: ...


class ListenerModel:
    """Stage 0 (``StageModel``). Holds no per-session state itself: one instance
    serves every session; ``step`` runs the ASR on the calling worker thread."""

    def __init__(self, asr: Transcriber, *, draft_pause_ms: int = DRAFT_PAUSE_MS,
                 warm_every_ms: int = WARM_EVERY_MS,
                 unsure_below: float | None = UNSURE_BELOW) -> None:
        self.asr = asr
        self.draft_pause_ms = draft_pause_ms  # 0: no drafts
        self.warm_every_ms = warm_every_ms  # 0: no warm drafts
        self.unsure_below = unsure_below  # None: every turn is taken at its word

    def open(self, fence: Fence) -> ListenState:
        return ListenState()

    def step(self, state: ListenState, payload: object) -> Iterator[StageResult]:
        if isinstance(payload, AudioUnit):
            if not (payload.drafts and self.draft_pause_ms):
                state.append(payload.pcm)
                return
            # frame by frame: a draft hears the audio up to the frame its pause
            # was reached on, however long the unit
            for piece in frames_of(payload.pcm, state.loudness.carry.size):
                state.append(piece)
                yield from self._heard(state)
        elif isinstance(payload, fx.CommitAudio):
            drafted = state.draft_heard()
            pcm = state.take()
            heard = drafted if drafted is not None else self.hear(pcm)
            turn = UserTurn(payload.fence.turn_id, payload.item_id, heard.text, payload.respond,
                            unsure=self.unsure(heard))
            yield StageResult(turn, segment_finished=True, visible=True)
        elif isinstance(payload, fx.DiscardAudio):
            state.clear()
        elif isinstance(payload, Relay):
            yield from relay(payload)
        else:
            raise TypeError(f"cascade listener cannot take {type(payload).__name__}")

    def close(self, state: ListenState) -> None:
        state.clear()

    def _heard(self, state: ListenState) -> Iterator[StageResult]:
        """What the audio so far calls for: a draft at a pause, its withdrawal when
        the user went on, or a warm draft a while into the speech."""
        if state.draft_due(self.draft_pause_ms):
            yield from self._draft(state)
        elif state.draft_overtaken():  # the user went on: withdraw the guess
            state.drafted = None
            yield StageResult(Draft(""), segment_finished=True, visible=True)
        elif self.warm_every_ms and state.warm_due(self.warm_every_ms):
            state.warmed_at = state.loudness.frames
            heard = self._try_hear(state.audio())
            if heard is not None and heard.text:
                yield StageResult(Draft(heard.text, warm=True), segment_finished=True,
                                  visible=False)

    def _draft(self, state: ListenState) -> Iterator[StageResult]:
        heard = self._try_hear(state.audio())
        state.drafted = _Drafted(state.loudness.last_loud, heard)
        if heard is not None and heard.text:
            yield StageResult(Draft(heard.text, unsure=self.unsure(heard)),
                              segment_finished=True, visible=True)

    def unsure(self, heard: Heard) -> bool:
        """Words heard, but scored below the threshold (``plugins.cascade.heard``)."""
        unsure = is_unsure(heard, self.unsure_below)
        if unsure:  # the score only: a transcript is the user's words, kept out of logs
            log.debug("heard unsure: score %.3f below %.3f", heard.score, self.unsure_below)
        return unsure

    def _try_hear(self, pcm: Pcm) -> Heard | None:
        """A draft's words, or None when the speech server could not give them (busy,
        away, silent): a draft only saves time, so its failure must not end the
        request and lose the turn's audio; the commit transcribes afresh and reports
        the server's error if it still fails then."""
        try:
            return self.hear(pcm)
        except ModelServerError as exc:
            log.info("a draft was not transcribed: %s", exc)
            return None

    def transcribe(self, pcm: Pcm) -> str:
        """A turn's words; "" without enough speech."""
        return self.hear(pcm).text

    def hear(self, pcm: Pcm) -> Heard:
        """A turn's words, with the recognizer's score where it gives one;
        "" (no score) without enough speech."""
        speech = utterance(pcm)
        if speech is None:
            return Heard("")
        # A turn ends ~0.5 s after the last word (the VAD's hangover); Whisper tiny
        # then often mishears that word. A second of real silence after it fixes
        # that (measured), and costs nothing: the window is >= 10 s anyway.
        tail = np.zeros(RATE * TAIL_SILENCE_MS // 1000, dtype=np.int16)
        audio = np.concatenate([speech, tail])
        if isinstance(self.asr, ScoringTranscriber):
            return self.asr.hear(audio)
        return Heard(self.asr.transcribe(audio))
