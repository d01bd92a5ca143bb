"""The model plugin interface: what the stages are and what their outputs mean.

A plugin declares its capabilities, describes its stages (``engines.stages``:
the engine contract, what model code each stage runs and where), gives each
session a voice activity detector and a ``StagePlan`` (which stage hears what),
and projects stage outputs into client-visible deltas.

Stage payloads are plugin-private: the orchestrator routes them opaquely. What
the core asks for is ``duplex.effects`` (a plan may hand those effects to its
stages as they are); the rest of the shared vocabulary is below. The gateway
opens each stage request with its session's fence (``duplex.fence.Fence``) as
the tag that a ``StageModel`` or ``ResumableAdapter`` gets in ``open``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from duplex.config import TurnDetection
from duplex.effects import PlanEffect
from duplex.events import item_text
from duplex.tools import ToolSet
from engines.stages import Stage

Pcm = npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class Capabilities:
    plugin_id: str
    input_rate: int  # Hz of the mono int16 PCM the listener takes
    output_rate: int  # Hz of the mono int16 PCM the talker produces
    unit_ms: int = 100  # audio is handed to stage 0 in units of this length
    supports_barge_in: bool = True
    stage_names: tuple[str, ...] = ("listen", "think", "speak")
    # The model calls the session's tools (projects ``FunctionCall``s); a plugin
    # that cannot has ``tools`` refused with an error, never dropped.
    tools: bool = False
    # It answers a ``response.create`` from the items in its ``input`` alone
    # (``StartResponse.input``); one that cannot has ``input`` refused.
    response_input: bool = False
    # The reply modalities it produces (``Speech`` for audio, ``TextOnly`` for
    # text); a session or response asking for another is refused.
    output_modalities: tuple[str, ...] = ("audio", "text")


# -- the plan: how a session's conversation becomes stage submissions --------------


@dataclass(frozen=True, slots=True)
class AudioUnit:
    """A unit of user audio (at ``input_rate``) for the stage that listens.

    ``drafts``: a turn that ends will be answered at once (turn detection with
    ``create_response``), so a listener may guess the turn's words at a pause
    and let the thinker start on them (``PromptChunk.speculative``)."""

    pcm: Pcm
    drafts: bool = False


@dataclass(frozen=True, slots=True)
class Submit:
    """Feed ``payload`` to the session's resumable request at ``stage`` (the
    runner binds it to the live fence: ``submit_initial`` for an epoch's first
    payload of that stage, ``submit_update`` after)."""

    stage: int
    payload: Any


class SessionView(Protocol):
    """What a plan may read of its session when it plans (the runner's answers)."""

    @property
    def instructions(self) -> str: ...

    @property
    def prefix_padding_ms(self) -> int:
        """Audio kept from before speech started, re-fed after a barge-in."""
        ...

    def history(self) -> Sequence[HistoryItem]:
        """The honest history (I6), oldest first: messages with words, function
        calls and their outputs."""
        ...

    @property
    def tools(self) -> ToolSet:
        """The session's tools and tool choice (a response may have its own:
        ``StartResponse.tools``)."""
        ...

    @property
    def auto_respond(self) -> bool:
        """A turn the server's turn detection ends is answered at once."""
        ...


class StagePlan(Protocol):
    """One session's plan, built by ``DuplexModelPlugin.plan``: the only place
    that knows which stage hears what. It turns the user's audio and the core's
    plan effects (``duplex.effects.PlanEffect``: commit, discard, start
    response, abort epoch, context change) into ``Submit``s, which the runner
    executes in order. Every response must be built from every turn committed
    before the effect that started it (I9): a plan keeps that order, e.g. by
    sending everything through the stage that listens.

    ``reply_timings`` names the stages whose first output after an input is a
    step of the reply's split (``response.done``'s ``timings_ms``: ``<name>`` →
    ms from the turn's end); a stage may also tell its own steps (``ReplyStep``).
    """

    @property
    def reply_timings(self) -> Mapping[int, str]: ...

    def audio(self, pcm: Pcm, view: SessionView) -> Sequence[Submit]:
        """User audio at the plugin's ``input_rate``, as it arrives."""
        ...

    def effect(self, effect: PlanEffect, view: SessionView) -> Sequence[Submit]:
        """A plan effect; ``AbortEpoch`` comes after the old epoch's requests
        were aborted, so what it returns starts the new epoch."""
        ...

    def stage_failed(self, stage: int) -> None:
        """``stage``'s request of the live epoch failed and was aborted; the next
        submission to it starts a new request (which may need its context again)."""
        ...


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One item of the conversation as a model hears it. ``kind`` is the item's
    type: a ``message`` (``role`` user, assistant or system; ``text`` its
    words), a ``function_call`` the assistant made (``name``, ``call_id``,
    ``arguments``: a JSON text) or a ``function_call_output`` (``call_id``;
    ``text`` the tool's output, ``role`` "tool")."""

    role: str
    text: str
    kind: str = "message"
    name: str = ""
    call_id: str = ""
    arguments: str = ""


def history_item(item: Mapping[str, Any]) -> HistoryItem | None:
    """A conversation item (as on the wire) as a model hears it; None for a
    message without words."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return HistoryItem("assistant", "", kind, str(item.get("name", "")),
                           str(item.get("call_id", "")), str(item.get("arguments", "")))
    if kind == "function_call_output":
        return HistoryItem("tool", str(item.get("output", "")), kind,
                           call_id=str(item.get("call_id", "")))
    text = item_text(item)
    return HistoryItem(str(item.get("role")), text) if text else None


@dataclass(frozen=True, slots=True)
class Context:
    """A thinker's context: its first payload (the instructions, the honest
    history and the session's tools), or later what changed (``instructions``
    and ``tools`` None: as they were)."""

    instructions: str | None
    items: tuple[HistoryItem, ...] = ()
    tools: ToolSet | None = None


# -- what stage outputs mean to a session ------------------------------------------


@dataclass(frozen=True, slots=True)
class Transcript:
    """The user's words for a committed turn."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class WordsHeard:
    """The user's words so far in the turn in progress (a listener's draft at a
    pause; "" withdraws them: the user went on). The session hands them to its
    VAD (``HearsWords``) for the end-of-turn decision; the client never sees them."""

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
class FunctionCall:
    """A tool call the model made, whole: ``arguments`` is a JSON text. The
    reply's words come before its calls; words after a call are not kept."""

    turn_id: int
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class EndOfResponse:
    turn_id: int


FIRST_TOKEN = "first_token"
FIRST_CLAUSE = "first_clause"


@dataclass(frozen=True, slots=True)
class ReplyStep:
    """The reply reached one of its steps just now, as the stage that took it
    says: a thinker's ``FIRST_TOKEN`` (its first generated text of the reply)
    and ``FIRST_CLAUSE`` (the first words it hands the voice). The session
    times it from the turn's end, as a phase of the reply's split
    (``gateway.session.turn_split``); the client never sees it."""

    turn_id: int
    name: str


Delta = Transcript | WordsHeard | Speech | TextOnly | FunctionCall | EndOfResponse | ReplyStep


# -- voice activity ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VadEvent:
    started: bool  # True: speech started; False: speech stopped
    audio_ms: int  # session-relative input time of the start/stop


class VoiceActivityDetector(Protocol):
    """One session's turn detection (``create_vad``). Under ``semantic_vad`` it
    ends turns with ``plugins.turn_end``; a VAD that knows the words said so
    far hands its segmenter a ``WordsSoFar``."""

    def process(self, pcm: Pcm) -> Sequence[VadEvent]: ...

    def reset(self) -> None: ...


class WordsSoFar(Protocol):
    """A partial transcript of the user's turn in progress, for the end-of-turn
    decision (``plugins.turn_end``). Optional: without one, ``semantic_vad``
    decides on silence and eagerness alone. Asked on every silent frame of a
    pause, on the event loop: it must answer at once (keep the words, do not
    transcribe here)."""

    def words_so_far(self) -> str: ...


@runtime_checkable
class HearsWords(Protocol):
    """A VAD whose words so far come from the plugin's stages (``WordsHeard``),
    e.g. from a listener in another process: they arrive between audio frames."""

    def hear_words(self, words: str) -> Sequence[VadEvent]:
        """The words so far are now ``words``; the speech stop this decides at
        once (the silence since the speech is already past their window), if any."""
        ...


Progress = Callable[[str], None]


@runtime_checkable
class DuplexModelPlugin(Protocol):
    """A voice agent's models. A plugin whose models call servers apart may also
    have ``model_servers()``: their clients' counts (``gateway.metrics.ServerCounts``),
    which the gateway reports as ``duplex_model_server_*`` once it has loaded."""

    capabilities: Capabilities

    def load(self, progress: Progress) -> None:
        """Load models once per process (blocking; called off the event loop),
        reporting each step through ``progress``, and warm them: the gateway says
        ready (``/readyz``) once this and its stages' engines are up, and a first
        turn must wait no longer than a later one. Run each model once on real
        input here; a stage whose model an engine owns warms there (e.g.
        ``LlamaCppStage.warm_prompt``)."""
        ...

    def stages(self) -> Sequence[Stage]: ...

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector: ...

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        """Client-visible meaning of a ``visible`` output of ``stage``."""
        ...

    def plan(self) -> StagePlan:
        """A new session's plan (one per session, called on the event loop)."""
        ...


@dataclass(slots=True)
class PluginStatus:
    ready: bool = False
    detail: str = "loading"
    extra: Mapping[str, Any] = field(default_factory=dict)
