"""What the session core asks its runner to do: commands it pulls after each input.

The runner executes them in order. ``Emit`` events are stamped with
``server_event_seq``, journaled, then sent (I4). ``SaveItem``/``ForgetItem``/
``SaveConfig`` are history and config writes. The rest (``PlanEffect``) are what
the model must hear of the conversation; the plugin's plan
(``plugins.base.StagePlan``) turns each into stage submissions, so the core and
the runner name no stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from duplex.events import Event
from duplex.fence import Fence
from duplex.tools import ToolSet


@dataclass(frozen=True, slots=True)
class Emit:
    event: Event


@dataclass(frozen=True, slots=True)
class CommitAudio:
    """End the user's turn in stage 0; ``respond`` starts the reply for ``fence.turn_id``."""

    fence: Fence
    item_id: str
    respond: bool


@dataclass(frozen=True, slots=True)
class DiscardAudio:
    """Forget the user audio stage 0 holds for the uncommitted turn."""

    fence: Fence


@dataclass(frozen=True, slots=True)
class StartResponse:
    """Ask the thinker to answer the conversation so far (``response.create``)
    with what ``tools`` lets it call (the session's, or the request's own)."""

    fence: Fence
    response_id: str
    instructions: str | None
    tools: ToolSet | None = None  # None: the session's, as the context has them
    # the reply's whole context in place of the conversation (response.input),
    # conversation items as on the wire; None: the conversation
    input: tuple[Event, ...] | None = None


@dataclass(frozen=True, slots=True)
class AbortEpoch:
    """Cancel everything of ``cancelled`` (an older epoch): stage requests, queued media."""

    cancelled: Fence
    current: Fence


@dataclass(frozen=True, slots=True)
class ContextChanged:
    """The model's context changed outside a turn: new ``instructions`` (None: as
    they were), ``items`` the client added (conversation items as on the wire:
    messages, function calls, function call outputs) and/or the session's
    ``tools`` (None: as they were)."""

    instructions: str | None = None
    items: tuple[Event, ...] = ()
    tools: ToolSet | None = None


@dataclass(frozen=True, slots=True)
class SaveItem:
    item_id: str
    item: Event
    previous_item_id: str | None


@dataclass(frozen=True, slots=True)
class ForgetItem:
    item_id: str


@dataclass(frozen=True, slots=True)
class SaveConfig:
    pass


@dataclass(frozen=True, slots=True)
class IdleTimer:
    """Start the idle timer ``token``: ``idle_ms`` after the reply's ``playback_ms``
    of audio has played (``duplex.idle``); when it runs out, tell the core
    (``SessionCore.idle_elapsed``). A newer timer replaces it."""

    token: int
    idle_ms: int
    playback_ms: float


PlanEffect = CommitAudio | DiscardAudio | StartResponse | AbortEpoch | ContextChanged
Effect = Emit | PlanEffect | SaveItem | ForgetItem | SaveConfig | IdleTimer
