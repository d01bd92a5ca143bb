"""The one place server events leave a session: stamp, journal, then send (I4).

Each event gets the next ``server_event_seq`` and is appended to the session's
Redis journal in one round trip per batch *before* it is written to the socket,
so a crash can never leave a client holding an event the journal lacks.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from duplex.errors import DuplexError, StoreUnavailable
from duplex.events import Event, to_beta
from duplex.store.base import SessionStore
from gateway.metrics import Metrics

log = logging.getLogger(__name__)


class Attachment(Protocol):
    """The socket a session is currently attached to."""

    async def send_text(self, text: str) -> None: ...


class Emitter:
    def __init__(self, store: SessionStore, session_id: str, owner: str, incarnation: int,
                 *, last_seq: int, beta: bool, journal_max: int, metrics: Metrics) -> None:
        self.store = store
        self.session_id = session_id
        self.owner = owner
        self.incarnation = incarnation
        self.last_seq = last_seq
        self.beta = beta
        self.journal_max = journal_max
        self.metrics = metrics
        self.attachment: Attachment | None = None
        self.on_send_failed: Callable[[], None] = lambda: None

    def _stamp(self, events: Sequence[Event]) -> list[tuple[int, str, str]]:
        stamped: list[tuple[int, str, str]] = []
        seq = self.last_seq
        for ev in events:
            wire = to_beta(ev) if self.beta else ev
            if wire is None:
                continue
            seq += 1
            wire = {"event_id": f"event_{self.session_id[-8:]}_{seq}", **wire,
                    "server_event_seq": seq}
            stamped.append((seq, wire["type"], json.dumps(wire, separators=(",", ":"))))
        return stamped

    async def publish(self, events: Sequence[Event]) -> None:
        """Journal then send ``events`` in order."""
        stamped = self._stamp(events)
        if not stamped:
            return
        try:
            await self.store.append_events(
                self.session_id, self.owner, self.incarnation,
                [(seq, text) for seq, _, text in stamped], max_len=self.journal_max,
                now=time.time())
        except StoreUnavailable as exc:
            # Never send what the journal lacks; tell the client why it missed it.
            log.warning("session %s: %d events not journaled: %s", self.session_id,
                        len(stamped), exc)
            await self.send_unjournaled(exc)
            return
        self.last_seq = stamped[-1][0]
        for _, kind, text in stamped:
            self.metrics.events.labels(kind).inc()
            if kind == "error":
                self.metrics.errors.labels(json.loads(text)["error"]["code"]).inc()
            await self.send(text)

    async def send_unjournaled(self, exc: DuplexError) -> None:
        """An error that could not be journaled itself (the store is down)."""
        self.metrics.errors.labels(exc.code).inc()
        await self.send(json.dumps({"type": "error", "error": exc.to_wire()}))

    async def send(self, text: str) -> None:
        attachment = self.attachment
        if attachment is None:
            return
        try:
            await attachment.send_text(text)
        except Exception as exc:  # the peer went away mid-send: detach, keep journaling
            log.info("session %s: send failed (%r); detaching", self.session_id, exc)
            self.attachment = None
            self.on_send_failed()
