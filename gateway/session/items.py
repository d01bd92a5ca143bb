"""What a session's inbox carries besides client commands, and the session's
bounds (I8).

Client commands (``duplex.commands``) arrive as parsed. The rest comes from the
orchestrator (a stage's output, a failure), from the inbox's own timers (the
idle timeout, the session's lifetime) and from the transports and the gateway
(a socket attached or gone, a close). ``Close``, ``Attach``, ``Detach`` and
``Confirm`` are handed to the runner as they are: they are actions too
(``gateway.session.actions``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from duplex import commands as c
from duplex.errors import DuplexError
from duplex.events import ServerEvent
from duplex.fence import Fence
from gateway.session.attachment import Attachment
from plugins import base as pb

# Commands that do not wait behind queued user audio (I7): what they do does not
# depend on that audio, and a user who cancels should not wait for it.
OVERTAKE_AUDIO = (c.CancelResponse, c.ClearOutputAudio, c.CloseSession)


def is_audio(item: object) -> bool:
    return isinstance(item, c.AppendAudio)


@dataclass(frozen=True, slots=True)
class Delta:
    """A stage's visible output, projected by the plugin (``plugins.base.Delta``)."""

    fence: Fence  # the stage request's fence
    delta: pb.Delta


@dataclass(frozen=True, slots=True)
class Failure:
    fence: Fence
    message: str
    stage: int


@dataclass(frozen=True, slots=True)
class ClientError:
    """An error about a client's message, told in order with the events before it."""

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
    """The socket of attachment ``generation`` spoke: its rotated token is proven."""

    generation: int


@dataclass(frozen=True, slots=True)
class SessionLimits:
    lead_ms: float = 500.0  # reply audio released at most this far ahead of real time
    max_pending_commands: int = 512
    max_pending_events: int = 256
    max_pending_audio: int = 4096  # reply chunks held until due
    renew_every_s: float = 1.0  # lease renewals on input activity, at most this often
    max_session_s: float | None = None  # a session's lifetime (None: no limit)
