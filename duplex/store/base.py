"""What the session core needs from persistence: ``SessionStore``.

The Redis implementation (``redis_store``) is the only one in the product; the
protocol exists so the core and the runners name a seam, not a client library.
Every mutation takes ``owner`` and ``incarnation`` and is refused with
``LeaseLost`` when another process holds the lease (I3). Every mutation is safe
to run twice: a client library may re-send it after a reconnect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from duplex.errors import ServerError
from duplex.lease import Lease

EndState = Literal["closed", "expired"]

# finish_expiry's event carries this literal text; the script replaces its 0
# with the seq it journals the event at (only Redis knows it at that moment).
SEQ_PLACEHOLDER = '"server_event_seq":0'

ExpiredClaim = tuple[str, str, str]
"""``(session_id, reason, owner)``; reason as ``duplex.lease.ExpiryReason``."""


class StoreConflict(ServerError):
    """The store disagrees with the caller's counters (a bug, or Redis lost writes).

    Codes: ``journal_gap`` (appended seqs skip ahead of the journal),
    ``epoch_ahead`` (a cancel names an epoch the store never reached).
    """

    default_code = "store_conflict"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A snapshot of ``dg:{sid}:meta``."""

    session_id: str
    owner: str
    incarnation: int
    epoch: int
    turn_id: int
    generation: int  # attachment generation
    last_seq: int  # last server_event_seq journaled
    state: str  # "open" | "expiring" (claimed by a reaper) | "closed" | "expired"
    config: str  # JSON text
    resume_token_digest: str
    created_at: float
    last_activity: float
    detached_at: float | None
    grace_s: float = 0.0
    idle_ttl_s: float | None = None
    recovery_token_digest: str = ""  # the spent token, until the new socket confirms

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def lease(self) -> Lease:
        """The pure lease this record stores (the scripts mirror ``duplex.lease``)."""
        return Lease(
            owner=self.owner,
            incarnation=self.incarnation,
            generation=self.generation,
            last_activity=self.last_activity,
            grace_s=self.grace_s,
            idle_ttl_s=self.idle_ttl_s,
            detached_at=self.detached_at,
            terminal=not self.is_open,
        )


class SessionStore(Protocol):
    async def open_session(
        self,
        session_id: str,
        *,
        owner: str,
        token_digest: str,
        config: str,
        now: float,
        max_sessions: int,
        max_sessions_per_owner: int,
        idle_ttl_s: float | None,
        grace_s: float,
    ) -> SessionRecord: ...

    async def renew(self, session_id: str, owner: str, incarnation: int, now: float) -> None: ...

    async def bump_epoch(
        self, session_id: str, owner: str, incarnation: int, cancelled_epoch: int
    ) -> int: ...

    async def append_events(
        self,
        session_id: str,
        owner: str,
        incarnation: int,
        events: Sequence[tuple[int, str]],
        *,
        max_len: int,
        now: float | None = None,
        epoch: int | None = None,
        turn_id: int | None = None,
        trim_upto: int | None = None,
    ) -> int: ...

    async def read_journal(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[tuple[int, str]]: ...

    async def journal_bounds(self, session_id: str) -> tuple[int | None, int]: ...

    async def settled_last_seq(self, session_id: str) -> int:
        """The last journaled seq once every event up to it is as durable as a
        successful ``append_events`` makes it (on the required replicas)."""
        ...

    async def trim_journal(self, session_id: str, upto_seq: int) -> None: ...

    async def history_append(
        self,
        session_id: str,
        owner: str,
        incarnation: int,
        item_id: str,
        item_json: str,
        previous_item_id: str | None = None,
    ) -> bool: ...

    async def history_replace(
        self, session_id: str, owner: str, incarnation: int, item_id: str, item_json: str
    ) -> None: ...

    async def history_delete(
        self, session_id: str, owner: str, incarnation: int, item_id: str
    ) -> bool: ...

    async def history(self, session_id: str) -> list[str]: ...

    async def close_session(
        self, session_id: str, owner: str, incarnation: int, *, state: EndState = "closed"
    ) -> bool: ...

    async def detach(self, session_id: str, generation: int, now: float) -> bool: ...

    async def resume(
        self,
        session_id: str,
        token_digest: str,
        expected_generation: int,
        new_token_digest: str,
        owner: str,
        now: float,
    ) -> SessionRecord: ...

    async def take_over(self, session_id: str, new_owner: str, now: float) -> SessionRecord: ...

    async def set_config(
        self, session_id: str, owner: str, incarnation: int, config: str
    ) -> None: ...

    # -- owner liveness (dg:owners) and the reaper

    async def heartbeat_owner(self, owner: str, now: float, ttl_s: float,
                              address: str = "") -> None: ...

    async def owner_alive(self, owner: str, now: float) -> bool: ...

    async def owner_address(self, owner: str, now: float) -> str | None: ...

    async def retire_owner(self, owner: str) -> None: ...

    async def list_owned(self, owner: str) -> list[str]: ...

    async def claim_expired(
        self, claimer: str, now: float, limit: int = 100, *, claim_ttl_s: float = 30.0
    ) -> list[ExpiredClaim]: ...

    async def finish_expiry(
        self, session_id: str, claimer: str, event_json: str
    ) -> int | None: ...

    async def confirm_token(self, session_id: str, generation: int) -> bool: ...

    async def get(self, session_id: str) -> SessionRecord | None: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...
