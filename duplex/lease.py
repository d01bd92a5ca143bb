"""Session leases: who owns a session and until when (invariant I3).

Rules, mirrored one for one by the Lua scripts in ``duplex/store/scripts``:

1. A lease has one ``owner`` (a gateway process id) and an ``incarnation`` that
   grows on every takeover by a different owner. Only the owner with the
   current incarnation may renew or write.
2. ``generation`` counts attachments: every resume is a compare-and-swap on it,
   so two sockets racing to resume cannot both win.
3. A detach names the generation it was serving; a detach for an older
   generation is a no-op, so a socket abandoning its own resume cannot put a
   newer attachment into grace.
4. A detached lease expires ``grace_s`` after ``detached_at``; an attached one
   expires ``idle_ttl_s`` after ``last_activity`` (``None`` disables this).
5. Terminal is forever.

Time is always an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from duplex.errors import LeaseLost, SessionStateError


class ExpiryReason(enum.StrEnum):
    DISCONNECT_GRACE = "disconnect_grace_expired"
    IDLE_TTL = "idle_ttl_expired"


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str
    incarnation: int
    generation: int
    last_activity: float
    grace_s: float
    idle_ttl_s: float | None
    detached_at: float | None = None
    terminal: bool = False

    @property
    def attached(self) -> bool:
        return self.detached_at is None and not self.terminal


def new_lease(
    owner: str, now: float, *, grace_s: float, idle_ttl_s: float | None
) -> Lease:
    return Lease(owner, incarnation=1, generation=1, last_activity=now,
                 grace_s=grace_s, idle_ttl_s=idle_ttl_s)


def _require_live(lease: Lease) -> None:
    if lease.terminal:
        raise SessionStateError("session has ended", code="session_closed")


def renew(lease: Lease, owner: str, incarnation: int, now: float) -> Lease:
    """Heartbeat or activity by the owner."""
    _require_live(lease)
    if owner != lease.owner or incarnation != lease.incarnation:
        raise LeaseLost(f"lease is held by {lease.owner}#{lease.incarnation}")
    return replace(lease, last_activity=max(lease.last_activity, now))


def detach(lease: Lease, generation: int, now: float) -> Lease:
    """The socket serving ``generation`` went away: start the grace period."""
    if lease.terminal or generation != lease.generation or lease.detached_at is not None:
        return lease
    return replace(lease, detached_at=now)


def resume(lease: Lease, expected_generation: int, now: float) -> Lease:
    """Attach a new socket: compare-and-swap on ``generation``."""
    _require_live(lease)
    if expected_generation != lease.generation:
        raise SessionStateError(
            "session was resumed by another connection", code="session_resume_conflict"
        )
    return replace(lease, generation=lease.generation + 1, detached_at=None,
                   last_activity=max(lease.last_activity, now))


def take_over(lease: Lease, new_owner: str, now: float) -> Lease:
    """Another process takes the session over (its old owner is gone)."""
    _require_live(lease)
    return replace(lease, owner=new_owner, incarnation=lease.incarnation + 1,
                   last_activity=max(lease.last_activity, now))


def end(lease: Lease) -> Lease:
    return replace(lease, terminal=True, generation=lease.generation + 1)


def deadline(lease: Lease) -> float | None:
    """When the lease expires if nothing happens; ``None`` for never."""
    if lease.terminal:
        return None
    if lease.detached_at is not None:
        return lease.detached_at + lease.grace_s
    if lease.idle_ttl_s is None:
        return None
    return lease.last_activity + lease.idle_ttl_s


def expiry(lease: Lease, now: float) -> ExpiryReason | None:
    """Why the lease has expired at ``now``, or ``None`` while it is live."""
    due = deadline(lease)
    if due is None or now < due:
        return None
    if lease.detached_at is not None:
        return ExpiryReason.DISCONNECT_GRACE
    return ExpiryReason.IDLE_TTL
