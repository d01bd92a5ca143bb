"""What the session machine asks of the runner: an item's transitions, as data.

``SessionMachine.take`` returns these, in order; the runner carries each out
(through the outbox, the orchestrator or the inbox) before it asks for the
next. ``Close``, ``Detach`` and ``Confirm`` (``gateway.session.items``) come as
they arrived: they are the runner's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from duplex.events import Event
from duplex.fence import Fence
from gateway.session.history import Write
from gateway.session.items import Attach, Close, Confirm, Detach
from plugins import base as pb


@dataclass(frozen=True, slots=True)
class Renew:
    """The client is active: renew the lease (I3) if it is due (``force``: now)."""

    force: bool


RENEW, RENEW_NOW = Renew(False), Renew(True)
# an append's actions, nearly always (the VAD heard no edge, the plan submits
# nothing): the one tuple, which the runner knows by identity
ONLY_RENEW: tuple[Renew, ...] = (RENEW,)


@dataclass(frozen=True, slots=True)
class Publish:
    """Journal, then send, ``events`` (I4); make ``writes`` meanwhile."""

    events: Sequence[Event]
    writes: Sequence[Write] = ()


@dataclass(frozen=True, slots=True)
class Submit:
    """Feed each payload to its stage's request of ``fence``'s epoch."""

    fence: Fence
    submissions: Sequence[pb.Submit]


@dataclass(frozen=True, slots=True)
class Abort:
    """A cancel (I2): abort the stage requests of ``cancelled``'s epoch and drop its
    media still queued, keeping ``live``'s."""

    cancelled: Fence
    live: Fence


@dataclass(frozen=True, slots=True)
class KeepEpoch:
    """Make sure the store holds ``epoch`` (a cancel's bump, unless an append did)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class StartIdle:
    """The core's idle timer ``token`` runs out at ``when`` (clock time)."""

    when: float
    token: int


@dataclass(frozen=True, slots=True)
class Trim:
    """The client acknowledged the events up to ``acked``."""

    acked: int


@dataclass(frozen=True, slots=True)
class AttachSocket:
    """Make ``item.attachment`` the session's socket; ``session`` is the session
    object its first event carries."""

    item: Attach
    session: Event


Action = (Renew | Publish | Submit | Abort | KeepEpoch | StartIdle | Trim | AttachSocket
          | Close | Detach | Confirm)
