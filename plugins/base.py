"""The model plugin interface: what the stages are and what their outputs mean.

A plugin declares its capabilities, builds one ``StageModel`` per stage (run by
the orchestrator's engines, off the event loop), gives each session a voice
activity detector, and projects stage outputs into client-visible deltas.

Stage payloads are plugin-private: the orchestrator routes them opaquely. The
only shared vocabulary is below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from duplex.config import TurnDetection
from duplex.fence import Fence

Pcm = npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class Capabilities:
    plugin_id: str
    input_rate: int  # Hz of the mono int16 PCM the listener takes
    output_rate: int  # Hz of the mono int16 PCM the talker produces
    unit_ms: int = 100  # audio is handed to stage 0 in units of this length
    supports_barge_in: bool = True
    stage_names: tuple[str, ...] = ("listen", "think", "speak")


# -- payloads the session runner hands to stages ---------------------------------


@dataclass(frozen=True, slots=True)
class AudioUnit:
    """A unit of user audio for stage 0."""

    pcm: Pcm


@dataclass(frozen=True, slots=True)
class CommitTurn:
    """The user's turn ``turn_id`` ended (VAD or client commit)."""

    turn_id: int
    item_id: str
    respond: bool  # the thinker should answer right away


@dataclass(frozen=True, slots=True)
class DiscardAudio:
    """``input_audio_buffer.clear``: forget the uncommitted user audio."""


@dataclass(frozen=True, slots=True)
class Respond:
    """``response.create`` with no new input: answer the conversation so far."""

    turn_id: int
    response_id: str
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryItem:
    role: str  # "user" | "assistant" | "system"
    text: str


@dataclass(frozen=True, slots=True)
class Context:
    """First payload of a thinker request: the honest history and instructions."""

    instructions: str
    items: tuple[HistoryItem, ...] = ()


# -- what stage outputs mean to a session ----------------------------------------


@dataclass(frozen=True, slots=True)
class Transcript:
    """The user's words for a committed turn."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Speech:
    """A chunk of the assistant's reply: audio at ``output_rate`` and its words."""

    turn_id: int
    pcm: Pcm
    text: str


@dataclass(frozen=True, slots=True)
class TextOnly:
    turn_id: int
    text: str


@dataclass(frozen=True, slots=True)
class EndOfResponse:
    turn_id: int


Delta = Transcript | Speech | TextOnly | EndOfResponse


@dataclass(frozen=True, slots=True)
class StageResult:
    """One output of a stage model.

    ``segment_finished`` outputs are forwarded to the next stage (if any) as its
    input; ``visible`` ones are also projected for the session.
    """

    payload: Any
    segment_finished: bool = True
    visible: bool = False


# -- stage models and VAD --------------------------------------------------------


class StageModel(Protocol):
    """Synchronous model code for one stage; always called on a worker thread.

    One ``StageModel`` serves every session of a process; per-request state is
    what ``open`` returns.
    """

    def open(self, fence: Fence) -> Any:
        """Start a resumable request; returns its state. Every payload, the first
        included, then arrives through ``step``."""
        ...

    def step(self, state: Any, payload: Any) -> Iterator[StageResult]:
        """Feed one input unit; yields outputs as they are ready."""
        ...

    def close(self, state: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class VadEvent:
    started: bool  # True: speech started; False: speech stopped
    audio_ms: int  # session-relative input time of the start/stop


class VoiceActivityDetector(Protocol):
    def process(self, pcm: Pcm) -> Sequence[VadEvent]: ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class InProcessStage:
    """A stage whose ``StageModel`` runs on this process's worker threads."""

    name: str
    model: StageModel
    threads: int = 1


@dataclass(frozen=True, slots=True)
class ResumableLlmStage:
    """A stage served by a vLLM engine: one resumable request per session epoch.

    ``adapter`` turns payloads into prompt chunks and generated text into stage
    results (``orchestrator.vllm_engine.ResumableAdapter``).
    """

    name: str
    adapter: Any
    model_dir: Path
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    sampling: Mapping[str, Any] | None = None  # vLLM SamplingParams fields


Stage = InProcessStage | ResumableLlmStage
Progress = Callable[[str], None]


@runtime_checkable
class DuplexModelPlugin(Protocol):
    capabilities: Capabilities

    def load(self, progress: Progress) -> None:
        """Load models once per process (blocking; called off the event loop),
        reporting each step through ``progress``."""
        ...

    def stages(self) -> Sequence[Stage]: ...

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector: ...

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        """Client-visible meaning of a ``visible`` output of ``stage``."""
        ...

    def context(self, instructions: str, history: Sequence[HistoryItem]) -> Context: ...


@dataclass(slots=True)
class PluginStatus:
    ready: bool = False
    detail: str = "loading"
    extra: Mapping[str, Any] = field(default_factory=dict)
