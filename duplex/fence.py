"""Fences: which work still belongs to a session (invariant I1).

A fence is ``(session_id, incarnation, epoch, turn_id)``. Every stage request,
stage output and journaled event carries one. They are ordered within a
session lexicographically by ``(incarnation, epoch, turn_id)``:

- ``incarnation`` grows on every lease takeover by another process (I3);
- ``epoch`` grows exactly once per accepted cancel or barge-in (I2);
- ``turn_id`` grows once per response the session opens (a committed turn that asks
  for a reply, or a ``response.create``), and never resets.

Everything here is a pure comparison. Cancelling tasks is an optimisation;
dropping whatever compares stale is the guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass

from duplex.errors import FenceError


@dataclass(frozen=True, slots=True)
class Fence:
    session_id: str
    incarnation: int
    epoch: int
    turn_id: int

    @property
    def rank(self) -> tuple[int, int, int]:
        return (self.incarnation, self.epoch, self.turn_id)

    def with_turn(self, turn_id: int) -> Fence:
        return Fence(self.session_id, self.incarnation, self.epoch, turn_id)


def is_stale(accepted: Fence, incoming: Fence) -> bool:
    """True when ``incoming`` must be dropped given the ``accepted`` high-water mark."""
    return incoming.session_id != accepted.session_id or incoming.rank < accepted.rank


def is_current_epoch(accepted: Fence, incoming: Fence) -> bool:
    """True when ``incoming`` belongs to the live epoch of the live incarnation.

    Stage output of any older epoch is dropped even if its turn is newer.
    """
    return (
        incoming.session_id == accepted.session_id
        and incoming.incarnation == accepted.incarnation
        and incoming.epoch == accepted.epoch
    )


def advance(accepted: Fence, incoming: Fence) -> Fence:
    """The new high-water mark after accepting ``incoming``; never goes backwards."""
    if is_stale(accepted, incoming):
        raise FenceError(f"fence {incoming.rank} is older than {accepted.rank}")
    return incoming


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    fence: Fence
    bumped: bool


def apply_cancel(current: Fence, cancelled_epoch: int) -> CancelOutcome:
    """Apply a cancel of ``cancelled_epoch`` to ``current``.

    A cancel names the epoch it cancels, so a retried cancel (same epoch, already
    applied) finds ``current.epoch`` past it and does not bump a second time.
    """
    if cancelled_epoch > current.epoch:
        raise FenceError(f"cannot cancel future epoch {cancelled_epoch} (at {current.epoch})")
    if cancelled_epoch < current.epoch:
        return CancelOutcome(current, bumped=False)
    bumped = Fence(current.session_id, current.incarnation, current.epoch + 1, current.turn_id)
    return CancelOutcome(bumped, bumped=True)


def takeover(current: Fence) -> Fence:
    """The fence after another process takes the lease over (incarnation + 1)."""
    return Fence(current.session_id, current.incarnation + 1, current.epoch, current.turn_id)
