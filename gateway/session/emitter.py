"""The one place server events leave a session: stamp, journal, then send (I4).

Each event gets the next ``server_event_seq`` and is appended to the session's
Redis journal in one round trip per batch *before* it is written to the socket,
so a crash can never leave a client holding an event the journal lacks. The
journal is bounded by age and bytes (trimmed here, by the appends themselves: no
round trip of its own) and by client acks.

Redis can still take acknowledged writes back: a failover that promotes a replica
other than the one that acknowledged them (a partition, a forced failover). The
emitter keeps its last few seconds of events, so when the journal turns out to be
behind what the client was sent, it writes them again, byte for byte.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson

from duplex.errors import DuplexError, LeaseLost, SessionStateError, StoreUnavailable
from duplex.events import Event, to_beta
from duplex.fence import Fence
from duplex.store.base import SessionStore, StoreConflict
from gateway.metrics import Metrics
from gateway.outbound import Outbound

log = logging.getLogger(__name__)

# what a Redis failover can take back: promotion to the old primary's replicas
# following the new one takes about a second
REPAIR_WINDOW_S = 5.0
REPAIR_MAX_BYTES = 1024 * 1024


class Attachment(Protocol):
    """The socket a session is currently attached to."""

    generation: int
    extensions: bool  # it takes the duplex events it did not ask for (``OPT_IN``)

    async def send(self, out: Outbound) -> None:
        """Send one server event, in this socket's protocol."""
        ...

    async def end(self, code: int, reason: str, *, linger_s: float = 0.0) -> None:
        """Close the socket (idempotent); its reader stops. ``linger_s`` keeps it open
        that long for late commands to be refused."""
        ...


# Extension events a client gets without having asked (by sending an extension
# command): journaled always, sent only to an attachment that opted in.
OPT_IN = frozenset({"session.expired"})


@dataclass(frozen=True, slots=True)
class JournalLimits:
    max_events: int = 20000
    max_age_s: float = 60.0
    max_bytes: int = 8 * 1024 * 1024


def unjournaled_error(error: DuplexError) -> Event:
    """An ``error`` sent outside the session's journal (a refused socket, a command
    after the end, the store down): it still has an ``event_id``, as every server
    event of OpenAI's has, so a strict client takes it."""
    return {"type": "error", "event_id": f"event_u{secrets.token_hex(8)}",
            "error": error.to_wire()}


def dumps(event: Event) -> str:
    """One server event as compact JSON text: orjson's (several times faster on the
    audio deltas' long base64 strings; UTF-8 text, not ``\\u`` escapes), the
    stdlib's for what orjson refuses (a lone surrogate, an integer beyond 64 bits)."""
    try:
        return orjson.dumps(event).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(event, separators=(",", ":"))


def outbound(event: Event) -> Outbound:
    """An event sent outside the journal, serialised here."""
    return Outbound(dumps(event), event["type"], event)


class Emitter:
    def __init__(self, store: SessionStore, session_id: str, owner: str, incarnation: int,
                 *, last_seq: int, epoch: int, beta: bool, limits: JournalLimits,
                 metrics: Metrics, fence: Callable[[], Fence]) -> None:
        self.store = store
        self.session_id = session_id
        self.owner = owner
        self.incarnation = incarnation
        self.last_seq = last_seq
        self.beta = beta
        self.limits = limits
        self.metrics = metrics
        self.fence = fence
        self.attachment: Attachment | None = None
        self.on_send_failed: Callable[[Attachment], None] = lambda attachment: None
        self._uncertain = False  # a failed append may still have landed
        # an append carries ``now``: it renews the lease as renew.lua would, so a
        # session that journaled lately needs no renewal of its own
        self.renewed_at = 0.0
        self.stored_epoch = epoch  # the epoch Redis holds: each append raises it
        self._window: deque[tuple[float, int, int]] = deque()  # (time, seq, bytes)
        self._window_bytes = 0
        self._recent: deque[tuple[float, int, str]] = deque()  # (time, seq, text)
        self._recent_bytes = 0

    def _stamp(self, events: Sequence[Event]) -> list[tuple[int, Outbound]]:
        stamped: list[tuple[int, Outbound]] = []
        seq = self.last_seq
        for ev in events:
            wire = to_beta(ev) if self.beta else ev
            if wire is None:
                continue
            seq += 1
            wire = {"event_id": f"event_{self.session_id[-8:]}_{seq}", **wire,
                    "server_event_seq": seq}
            stamped.append((seq, Outbound(dumps(wire), wire["type"], wire)))
        return stamped

    async def publish(self, events: Sequence[Event], *,
                      before_send: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Journal then send ``events`` in order; False when the store refused them.
        ``before_send`` runs once they are journaled, before the first is sent (so it
        has run if this returns True and events were for the wire)."""
        try:
            if self._uncertain:
                await self._reconcile()
            stamped = self._stamp(events)
            if not stamped:
                return True
            now = time.time()
            batch = [(seq, out.text) for seq, out in stamped]
            trim = self._trim_point(now, sum(len(text) for _, text in batch))
            try:
                await self._append(batch, now, trim)
            except StoreConflict as exc:
                if exc.code != "journal_gap":
                    raise
                await self._append(await self._taken_back(exc) + batch, now, trim)
        except SessionStateError as exc:  # the store no longer has this session open
            raise LeaseLost(f"the session is gone from the store: {exc.message}") from exc
        except StoreUnavailable as exc:
            # Never send what the journal lacks; tell the client why it missed it.
            log.warning("session %s: events not journaled: %s", self.session_id, exc)
            self._uncertain = True
            await self.send_unjournaled(exc)
            return False
        self.last_seq = stamped[-1][0]
        if before_send is not None:
            await before_send()
        while self._window and trim is not None and self._window[0][1] <= trim:
            self._window_bytes -= self._window.popleft()[2]
        for seq, out in stamped:
            self.metrics.events.labels(out.type).inc()
            if out.type == "error":
                self.metrics.errors.labels(out.event()["error"]["code"]).inc()
            self._window.append((now, seq, len(out.text)))
            self._window_bytes += len(out.text)
            self._keep(now, seq, out.text)
            await self.send(out)
        return True

    async def _append(self, batch: list[tuple[int, str]], now: float,
                      trim: int | None) -> None:
        fence = self.fence()
        await self.store.append_events(
            self.session_id, self.owner, self.incarnation, batch,
            max_len=self.limits.max_events, now=now, epoch=fence.epoch, turn_id=fence.turn_id,
            trim_upto=trim)
        self.renewed_at = max(self.renewed_at, now)
        self.stored_epoch = max(self.stored_epoch, fence.epoch)

    def _keep(self, now: float, seq: int, text: str) -> None:
        self._recent.append((now, seq, text))
        self._recent_bytes += len(text)
        while self._recent and (self._recent[0][0] < now - REPAIR_WINDOW_S
                                or self._recent_bytes > REPAIR_MAX_BYTES):
            self._recent_bytes -= len(self._recent.popleft()[2])

    async def _taken_back(self, gap: StoreConflict) -> list[tuple[int, str]]:
        """The journal is behind what the client was sent: a failover took events
        back. Those events, if they are all still kept here; else ``gap`` again."""
        journaled = await self.store.settled_last_seq(self.session_id)
        lost = [(seq, text) for _, seq, text in self._recent if seq > journaled]
        if not lost or (lost[0][0], lost[-1][0]) != (journaled + 1, self.last_seq):
            raise gap
        log.warning("session %s: Redis lost journaled events %d..%d (a failover took them "
                    "back); journaling them again", self.session_id, journaled + 1,
                    self.last_seq)
        self.metrics.journal_repairs.inc()
        return lost

    async def _reconcile(self) -> None:
        """After a failed append: the journal is the truth. Send what landed, once it
        is durable: an append short of replica acks is on the primary alone, and a
        failover would take back what the client was sent (I4)."""
        last = await self.store.settled_last_seq(self.session_id)
        while self.last_seq < last:
            entries = await self.store.read_journal(self.session_id, self.last_seq, 500)
            if not entries:
                break
            for seq, text in entries:
                if seq > last:
                    break
                self._keep(time.time(), seq, text)
                await self.send(Outbound(text))
                self.last_seq = seq
        self._uncertain = False

    def _trim_point(self, now: float, incoming: int) -> int | None:
        """The last seq to drop from the journal so that it keeps ``max_age_s`` and
        ``max_bytes`` with ``incoming`` more bytes: the append does it (no round
        trip of its own), and the window forgets them once it has."""
        limits = self.limits
        kept = self._window_bytes + incoming
        upto: int | None = None
        for at, seq, size in self._window:
            if at >= now - limits.max_age_s and kept <= limits.max_bytes:
                break
            upto, kept = seq, kept - size
        return upto

    async def replay(self, cursor: int) -> int:
        """Send the journaled events after ``cursor`` (checked by the caller); returns count."""
        sent = 0
        while cursor < self.last_seq:
            entries = await self.store.read_journal(self.session_id, cursor, 500)
            if not entries:
                break
            for seq, text in entries:
                await self.send(Outbound(text))
                cursor, sent = seq, sent + 1
        return sent

    async def send_unjournaled(self, exc: DuplexError) -> None:
        """An error that is not journaled (the store is down, or the session ended)."""
        self.metrics.errors.labels(exc.code).inc()
        await self.send(outbound(unjournaled_error(exc)))

    async def send(self, out: Outbound) -> None:
        attachment = self.attachment
        if attachment is None or (out.type in OPT_IN and not attachment.extensions):
            return
        try:
            await attachment.send(out)
        except Exception as exc:  # the peer went away mid-send: detach, keep journaling
            # routine when a client hangs up mid-reply: not worth an INFO line each time
            log.debug("session %s: send failed (%r); detaching", self.session_id, exc)
            self.attachment = None
            self.on_send_failed(attachment)
