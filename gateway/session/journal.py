"""A session's journal in Redis, and the lease and epoch its appends carry.

Each event gets the next ``server_event_seq`` and is appended to the session's
Redis journal in one round trip per batch *before* it is written to the socket
(I4, ``gateway.session.outbox``), so a crash can never leave a client holding an
event the journal lacks. The journal is bounded by age and bytes (trimmed here,
by the appends themselves: no round trip of its own) and by client acks.

An append also renews the session's lease (``append_events.lua`` touches it as
``renew.lua`` does) and raises the epoch Redis holds to the session's: a session
that journaled lately needs no renewal of its own, and a cancel followed by
events (its ``response.done``) no epoch write of its own (I2).

Redis can still take acknowledged writes back: a failover that promotes a replica
other than the one that acknowledged them (a partition, a forced failover). The
journal keeps its last few seconds of events, so when Redis turns out to be
behind what the client was sent, it writes them again, byte for byte.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from types import TracebackType

from duplex.errors import LeaseLost, SessionStateError, StoreUnavailable
from duplex.events import Event, to_beta
from duplex.fence import Fence
from duplex.store.base import SessionStore, StoreConflict
from gateway.metrics import Metrics
from gateway.outbound import Outbound
from gateway.session.attachment import dumps
from gateway.session.clock import Clock

log = logging.getLogger(__name__)

# what a Redis failover can take back: promotion to the old primary's replicas
# following the new one takes about a second
REPAIR_WINDOW_S = 5.0
REPAIR_MAX_BYTES = 1024 * 1024
PAGE = 500  # journal entries read a round trip (a replay, a reconcile)


def utf8_size(text: str) -> int:
    """The bytes Redis holds for ``text`` (an event's JSON: mostly ASCII, and
    ``isascii`` copies nothing)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class Ownership:
    """The session and who holds it: what every write of it is fenced by (I3)."""

    session_id: str
    owner: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class JournalLimits:
    max_events: int = 20000
    max_age_s: float = 60.0
    max_bytes: int = 8 * 1024 * 1024


class Journal:
    def __init__(self, store: SessionStore, ownership: Ownership, *, last_seq: int,
                 epoch: int, beta: bool, limits: JournalLimits, metrics: Metrics,
                 clock: Clock) -> None:
        self.store = store
        self.ownership = ownership
        self.last_seq = last_seq
        self._beta = beta
        self._limits = limits
        self._metrics = metrics
        self._clock = clock
        self.renewed_at = 0.0  # wall time of the last write that renewed the lease
        self.stored_epoch = epoch  # the epoch Redis holds: each append raises it
        self._window: deque[tuple[float, int, int]] = deque()  # (time, seq, bytes)
        self._window_bytes = 0
        self._recent: deque[tuple[float, int, str]] = deque()  # (time, seq, text)
        self._recent_bytes = 0
        self._fenced = _Fenced()
        self._event_id = f"event_{ownership.session_id[-8:]}_"  # then the seq

    @property
    def uncertain(self) -> bool:
        """A failed append may still have landed: ``landed`` before the next write."""
        return self._fenced.uncertain

    @uncertain.setter
    def uncertain(self, value: bool) -> None:
        self._fenced.uncertain = value

    @property
    def session_id(self) -> str:
        return self.ownership.session_id

    def _stamp(self, events: Sequence[Event]) -> tuple[list[Outbound], list[tuple[int, str]]]:
        """``events`` (those of the client's dialect) stamped and serialised: what to
        send, and the (seq, text) pairs to append, in one pass (a few a reply chunk)."""
        stamped: list[Outbound] = []
        batch: list[tuple[int, str]] = []
        seq, event_id, beta = self.last_seq, self._event_id, self._beta
        for ev in events:
            wire = to_beta(ev) if beta else ev
            if wire is None:
                continue
            seq += 1
            wire = {"event_id": f"{event_id}{seq}", **wire, "server_event_seq": seq}
            text = dumps(wire)
            stamped.append(Outbound(text, wire["type"], wire))
            batch.append((seq, text))
        return stamped, batch

    async def write(self, events: Sequence[Event], fence: Fence) -> list[Outbound]:
        """Stamp and append ``events`` (those of the client's dialect), then what to
        send. Raises ``StoreUnavailable`` (then ``uncertain``: it may have landed)
        and ``LeaseLost``; call ``landed`` before the next write when uncertain."""
        stamped, batch = self._stamp(events)
        if not stamped:
            return []
        now = self._clock.wall()
        # utf8_size's, inline: the bytes Redis holds for each event
        sizes = [len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                 for _, text in batch]
        trim = self._trim_point(now, sum(sizes))
        with self._fenced:
            try:
                await self._append(batch, now, trim, fence)
            except StoreConflict as exc:
                if exc.code != "journal_gap":
                    raise
                await self._append(await self._taken_back(exc) + batch, now, trim, fence)
        self.last_seq = batch[-1][0]
        while self._window and trim is not None and self._window[0][1] <= trim:
            self._window_bytes -= self._window.popleft()[2]
        for (seq, text), size in zip(batch, sizes, strict=True):
            self._window.append((now, seq, size))
            self._window_bytes += size
            self._keep(now, seq, text)
        return stamped

    async def _append(self, batch: list[tuple[int, str]], now: float, trim: int | None,
                      fence: Fence) -> None:
        o = self.ownership
        await self.store.append_events(
            o.session_id, o.owner, o.incarnation, batch, max_len=self._limits.max_events,
            now=now, epoch=fence.epoch, turn_id=fence.turn_id, trim_upto=trim)
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
        self._metrics.journal_repairs.inc()
        return lost

    async def landed(self) -> AsyncIterator[Outbound]:
        """After a failed append: the journal is the truth. What landed, to send, once
        it is durable: an append short of replica acks is on the primary alone, and
        a failover would take back what the client was sent (I4)."""
        with self._fenced:
            last = await self.store.settled_last_seq(self.session_id)
            while self.last_seq < last:
                entries = await self.store.read_journal(self.session_id, self.last_seq, PAGE)
                if not entries:
                    break
                for seq, text in entries:
                    if seq > last:
                        break
                    self._keep(self._clock.wall(), seq, text)
                    yield Outbound(text)
                    self.last_seq = seq
        self.uncertain = False

    def _trim_point(self, now: float, incoming: int) -> int | None:
        """The last seq to drop from the journal so that it keeps ``max_age_s`` and
        ``max_bytes`` with ``incoming`` more bytes: the append does it (no round
        trip of its own), and the window forgets them once it has."""
        limits = self._limits
        kept = self._window_bytes + incoming
        upto: int | None = None
        for at, seq, size in self._window:
            if at >= now - limits.max_age_s and kept <= limits.max_bytes:
                break
            upto, kept = seq, kept - size
        return upto

    async def read_after(self, cursor: int) -> AsyncIterator[Outbound]:
        """The journaled events after ``cursor`` (checked by the caller), in order."""
        while cursor < self.last_seq:
            entries = await self.store.read_journal(self.session_id, cursor, PAGE)
            if not entries:
                break
            for seq, text in entries:
                yield Outbound(text)
                cursor = seq

    def renewal(self) -> Awaitable[None]:
        """The lease renewal to await, now (whether one is due, ``renewed_at`` says)."""
        now = self._clock.wall()
        self.renewed_at = now
        return self._renew(now)

    async def _renew(self, now: float) -> None:
        o = self.ownership
        try:
            await self.store.renew(o.session_id, o.owner, o.incarnation, now)
        except StoreUnavailable as exc:
            log.info("session %s: lease not renewed: %s", o.session_id, exc)
        except SessionStateError as exc:  # ended or vanished under us
            raise LeaseLost(f"the session is gone from the store: {exc.message}") from exc

    async def keep_epoch(self, epoch: int) -> None:
        """Raise the epoch Redis holds to ``epoch``, unless an append did (I2): a
        cancel that journaled nothing after it (a close mid-reply) is bumped here,
        once per cancel."""
        o = self.ownership
        while self.stored_epoch < epoch:
            try:
                self.stored_epoch = await self.store.bump_epoch(
                    o.session_id, o.owner, o.incarnation, self.stored_epoch)
            except StoreUnavailable as exc:
                log.warning("session %s: epoch bump not persisted: %s", o.session_id, exc)
                return


class _Fenced:
    """Store errors as the session hears them: one that says the session is no
    longer open here is the lease lost (I3); Redis away leaves the journal
    uncertain (an append may have landed). A context manager made once (a journal
    write is made several times a second). It holds the uncertainty itself, not
    its journal: a journal holding it, held by it, would be a reference cycle,
    which keeps an ended session's journal until a full collection (gateway/heap.py)."""

    __slots__ = ("uncertain",)

    def __init__(self) -> None:
        self.uncertain = False

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, StoreUnavailable):
            self.uncertain = True
        elif isinstance(exc, SessionStateError):
            raise LeaseLost(f"the session is gone from the store: {exc.message}") from exc
