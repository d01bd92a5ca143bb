"""What a session runner's mailbox carries, its limits, and the session as its
plugin's plan sees it. (The runner itself is ``gateway.session.session_runner``.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from duplex import commands as c
from duplex.errors import DuplexError
from duplex.events import ServerEvent
from duplex.fence import Fence
from duplex.session import SessionCore
from duplex.tools import ToolSet
from gateway.session.emitter import Attachment
from plugins import base as pb

# Commands that do not wait behind queued user audio (I7): what they do does not
# depend on that audio, and a user who cancels should not wait for it.
OVERTAKE_AUDIO = (c.CancelResponse, c.ClearOutputAudio, c.CloseSession)
DEFAULT_PREFIX_MS = 300  # speech kept for a barge-in's new epoch without server VAD


@dataclass(frozen=True, slots=True)
class Delta:
    fence: Fence  # the stage request's fence
    delta: pb.Delta


@dataclass(frozen=True, slots=True)
class Failure:
    fence: Fence
    message: str
    stage: int


@dataclass(frozen=True, slots=True)
class ClientError:
    error: DuplexError


@dataclass(frozen=True, slots=True)
class IdleElapsed:
    """The core's idle timer ``token`` ran out (``duplex.idle``)."""

    token: int


@dataclass(frozen=True, slots=True)
class Close:
    reason: str
    terminal: ServerEvent = ServerEvent.SESSION_CLOSED


@dataclass(slots=True)
class Attach:
    attachment: Attachment
    resume_token: str
    cursor: int | None  # None: a new session (send session.created)
    done: asyncio.Future[bool]  # False: refused after the swap (a journal gap)


@dataclass(frozen=True, slots=True)
class Detach:
    attachment: Attachment


@dataclass(frozen=True, slots=True)
class Confirm:
    generation: int


@dataclass(slots=True)
class Heard:
    """The rest of an append the runner took at once (``SessionRunner._append_now``):
    its VAD events, and the plan's payloads for it once planned (None: not yet)."""
    pcm: pb.Pcm
    vad_events: tuple[pb.VadEvent, ...]
    submissions: Sequence[pb.Submit] | None = None


def is_audio(item: Any) -> bool:
    return isinstance(item, c.AppendAudio | Heard)


class CoreView:
    """The session as its plugin's plan sees it (``plugins.base.SessionView``)."""

    __slots__ = ("_core",)

    def __init__(self, core: SessionCore) -> None:
        self._core = core

    @property
    def instructions(self) -> str:
        return self._core.config.instructions

    @property
    def prefix_padding_ms(self) -> int:
        td = self._core.config.turn_detection
        return td.prefix_padding_ms if td is not None else DEFAULT_PREFIX_MS

    def history(self) -> tuple[pb.HistoryItem, ...]:
        return tuple(h for h in map(pb.history_item, self._core.history()) if h is not None)

    @property
    def tools(self) -> ToolSet:
        return self._core.config.tools

    @property
    def auto_respond(self) -> bool:
        config = self._core.config
        td = config.turn_detection
        return td is not None and td.create_response and not config.transcribing_only


@dataclass(frozen=True, slots=True)
class RunnerLimits:
    lead_ms: float = 500.0
    max_pending_commands: int = 512
    max_pending_events: int = 256
    max_pending_audio: int = 4096
    renew_every_s: float = 1.0  # lease renewals on input activity, at most this often
    max_session_s: float | None = None  # a session's lifetime (None: no limit)




class ReplyClock:
    """Where a reply's time went: ``response.done`` carries ``timings_ms`` (an
    extension), each measured from the end of the user's turn (or the
    ``response.create``) to the transcript, to each timed stage's first output
    and to the first audio. ``now`` is injectable for tests."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._start: float | None = None
        self._ms: dict[str, float] = {}

    def start(self) -> None:
        self._start, self._ms = self._now(), {}

    def mark(self, name: str) -> float | None:
        """Note ``name`` now (the first time only); its seconds since the start."""
        if self._start is None:
            return None
        seconds = self._now() - self._start
        self._ms.setdefault(name, 1000 * seconds)
        return seconds

    def stage(self, name: str, seconds: float) -> None:
        if self._start is not None:
            self._ms.setdefault(name, 1000 * seconds)

    def first_audio(self) -> float | None:
        """The reply is heard: its latency (None if not timed); the clock stops."""
        seconds = self.mark("first_audio")
        self._start = None
        return seconds

    def stamp(self, ev: dict[str, Any]) -> dict[str, Any]:
        if ev["type"] != ServerEvent.RESPONSE_DONE or not self._ms:
            return ev
        timings, self._ms = {k: round(v, 1) for k, v in self._ms.items()}, {}
        return {**ev, "timings_ms": timings}
