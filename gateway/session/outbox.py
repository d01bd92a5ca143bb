"""The one place a session's words leave it: journaled, then sent (I4).

The outbox owns the session's socket (its ``Attachment``: which one is current,
the swap when another attaches, the detach when one goes) and everything the
session writes to the store: the journal (``gateway.session.journal``), the
history and config writes (``gateway.session.history``), the epoch bumps of
cancels, lease renewals, and the session's end. Only the runner's worker calls
it, so nothing the session says interleaves with a replay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import Counter

from duplex import attach as at
from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.errors import DuplexError, LeaseLost, SessionStateError, StoreUnavailable
from duplex.events import Event, ServerEvent, event
from duplex.fence import Fence
from duplex.store.base import EndState
from gateway.metrics import Metrics
from gateway.outbound import Outbound
from gateway.session.attachment import OPT_IN, Attachment, outbound, unjournaled_error
from gateway.session.clock import Clock
from gateway.session.history import HistoryWrites, Write
from gateway.session.items import Attach
from gateway.session.journal import Journal

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 256  # a client's session.close reason, as the terminal repeats it (I8)


class Outbox:
    def __init__(self, journal: Journal, *, fence: Callable[[], Fence],
                 on_send_failed: Callable[[Attachment], None], metrics: Metrics,
                 clock: Clock) -> None:
        self.journal = journal
        self._store = journal.store
        self._sid = journal.session_id
        self._fence = fence
        self._on_send_failed = on_send_failed
        self._metrics = metrics
        self._clock = clock
        self._history = HistoryWrites(journal.store, journal.ownership)
        # the session's socket: others read it (``serves``, 50 times a second a
        # session: an attribute, not a property), only the outbox sets it
        self.attachment: Attachment | None = None
        self._latest: Attachment | None = None  # the last socket attached, gone or not
        self._recovery: at.Recovery | None = None  # said in the next session.resumed
        # duplex_server_events' child a type, looked up once (``labels`` costs a
        # lock and three calls; a reply sends a few events a word)
        self._counted: dict[str, Counter] = {}

    # -- journal, then send ---------------------------------------------------------

    async def publish(self, events: Sequence[Event], writes: Sequence[Write] = (), *,
                      before_send: Callable[[], Awaitable[None]] | None = None) -> bool:
        """Journal then send ``events`` in order, making ``writes`` meanwhile (the two
        wait on Redis together: a turn's commit, its transcript and a barge-in each
        made two round trips, one after the other). False when the store refused
        the events. ``before_send`` runs once they are journaled, before the first
        is sent (so it has run if this returns True and events were for the wire)."""
        if not writes:
            return await self._publish(events, before_send)
        if not events:
            await self._history.write(writes)
            return True
        saving = asyncio.ensure_future(self._history.write(writes))
        try:
            journaled = await self._publish(events, before_send)
        except BaseException:
            saving.cancel()  # the lease is lost or the worker stops: a held write waits
            saving.add_done_callback(_retrieved)
            raise
        await saving
        return journaled

    async def _publish(self, events: Sequence[Event],
                       before_send: Callable[[], Awaitable[None]] | None) -> bool:
        journal = self.journal
        try:
            if journal.uncertain:
                async for landed in journal.landed():
                    await self.send(landed)
            stamped = await journal.write(events, self._fence())
        except StoreUnavailable as exc:
            # Never send what the journal lacks; tell the client why it missed it.
            log.warning("session %s: events not journaled: %s", self._sid, exc)
            await self.send_unjournaled(exc)
            return False
        if not stamped:
            return True
        if before_send is not None:
            await before_send()
        counted = self._counted
        for out in stamped:
            child = counted.get(out.type)
            if child is None:
                child = counted[out.type] = self._metrics.events.labels(out.type)
            child.inc()
            if out.type == "error":
                self._metrics.errors.labels(out.event()["error"]["code"]).inc()
            await self.send(out)
        return True

    async def send(self, out: Outbound) -> None:
        """``out`` to the current socket, if it takes it; a socket whose send fails is
        detached (the session keeps journaling)."""
        attachment = self.attachment
        if attachment is None or (out.type in OPT_IN and not attachment.extensions):
            return
        try:
            await attachment.send(out)
        except Exception as exc:  # the peer went away mid-send: detach, keep journaling
            # routine when a client hangs up mid-reply: not worth an INFO line each time
            log.debug("session %s: send failed (%r); detaching", self._sid, exc)
            self.attachment = None
            self._on_send_failed(attachment)

    async def send_unjournaled(self, exc: DuplexError) -> None:
        """An error that is not journaled (the store is down, or the session ended)."""
        self._metrics.errors.labels(exc.code).inc()
        await self.send(outbound(unjournaled_error(exc)))

    # -- the socket ------------------------------------------------------------------

    def recovered(self, recovery: at.Recovery) -> None:
        """This process took the session over: the next ``session.resumed`` says so."""
        self._recovery = recovery

    async def attach(self, item: Attach, session: Event) -> None:
        """Make ``item.attachment`` the session's socket (``duplex.attach`` says what
        each socket hears); ``item.done`` says whether it was taken (False: the
        resume was refused after all, and the session waits). ``session``: the
        session object, as ``session.created``/``session.resumed`` carry it."""
        old, new = self.attachment, item.attachment
        oldest: int | None = None
        if item.cursor is not None:
            oldest, _ = await self._store.journal_bounds(self._sid)
        steps = at.attach_steps(at.Attach(
            new.generation, item.resume_token, item.cursor,
            replacing=old is not None and old is not new, session=session, oldest=oldest,
            last_seq=self.journal.last_seq, recovery=self._recovery))
        for step in steps:
            match step:
                case at.SendOld():
                    await self.send(outbound(step.event))
                case at.EndOld():  # replaced: its peer's close no longer counts
                    self.attachment = self._latest = None
                    assert old is not None
                    await old.end(step.code, step.reason)
                case at.Publish():
                    self.attachment = self._latest = new
                    await self.publish([step.event])
                case at.SendNew():
                    self.attachment = self._latest = new
                    await self.send(outbound(step.event))
                case at.Replay():
                    self._recovery = None  # said once
                    async for out in self.journal.read_after(step.cursor):
                        await self.send(out)
                case at.Refuse():
                    await new.end(step.code, step.reason)
                    await self.detach(new)  # the session waits, as it was
        item.done.set_result(not isinstance(steps[-1], at.Refuse))

    async def detach(self, attachment: Attachment) -> None:
        """The socket of ``attachment`` went away: the session goes on, its grace
        starts. The attachment is ended too: its endpoint waits on that, and a
        socket whose send failed may never report its own end (a connection task
        would leak)."""
        if self.attachment is attachment:
            self.attachment = None
        await attachment.end(CloseCode.GOING_AWAY, "detached")
        try:
            await self._store.detach(self._sid, attachment.generation, self._clock.wall())
        except StoreUnavailable as exc:  # the lease then ends by idle expiry instead
            log.warning("session %s: detach not persisted: %s", self._sid, exc)

    def dropped(self, attachment: Attachment) -> bool:
        """``attachment`` was the session's socket until it went (a failed send, a
        detach) and none has attached since."""
        return self.attachment is None and self._latest is attachment

    def forget(self, attachment: Attachment) -> None:
        """``attachment``'s socket is done: ended (by the session, or by its peer,
        which the session has been told of) and no longer read. The one call from
        outside the worker, and it changes nothing the worker relies on: a send to
        that socket would go nowhere either way. The attachment holds the session,
        so a session that kept it would be a reference cycle, and an ended
        session's state would wait for a full collection (gateway/heap.py)."""
        if self.attachment is attachment:
            self.attachment = None
        if self._latest is attachment:
            self._latest = None

    def let_go(self) -> Attachment | None:
        """The socket is no longer the session's (this process stops); returned for
        its endpoint to close. The session stays resumable; how the peer then
        closes the socket no longer counts."""
        attachment, self.attachment, self._latest = self.attachment, None, None
        return attachment

    # -- the store ---------------------------------------------------------------------

    def renew(self) -> Awaitable[None]:
        """The lease renewal (I3) to await. The runner asks for it only once one is
        due (``journal.renewed_at``): a journal append renews the lease too, so only
        a session that journaled nothing lately makes this round trip."""
        return self.journal.renewal()

    async def keep_epoch(self, epoch: int) -> None:
        await self.journal.keep_epoch(epoch)

    async def trim(self, acked: int) -> None:
        """The client has the events up to ``acked``: the journal may forget them."""
        await self._store.trim_journal(self._sid, min(acked, self.journal.last_seq))

    async def confirm_token(self, generation: int) -> None:
        try:
            await self._store.confirm_token(self._sid, generation)
        except StoreUnavailable as exc:  # the spent token stays usable a while
            log.info("session %s: token not confirmed: %s", self._sid, exc)

    # -- the end -------------------------------------------------------------------------

    async def say_terminal(self, terminal: ServerEvent, reason: str,
                           max_session_s: float | None) -> EndState | None:
        """Exactly one terminal event (I5), journaled, then the slot freed, then the
        terminal sent: a client that reopens the moment it hears the terminal finds
        the slot free (R9). Returns the end the store did not take (it was away),
        for the gateway to retry; None once it has."""
        final = event(terminal, reason=reason[:MAX_REASON_CHARS])
        expired = terminal is ServerEvent.SESSION_EXPIRED
        state: EndState = "expired" if expired else "closed"
        # a connected client hears it as OpenAI's error too (a detached one is gone)
        told = expired and self.attachment is not None
        ending = [at.expired_error(reason, max_session_s), final] if told else [final]
        saved = False

        async def close() -> None:
            nonlocal saved
            saved = await self._closed(state)

        try:  # a journaled terminal frees the slot before it is sent
            journaled = await self.publish(ending, before_send=close)
        except DuplexError as exc:  # e.g. another process claimed it meanwhile
            log.warning("session %s: terminal not journaled: %s", self._sid, exc)
            journaled = False
        if not journaled:
            await close()
            for ended in ending:
                await self.send(outbound(ended))
        return None if saved else state

    async def _closed(self, state: EndState) -> bool:
        """End the session in the store; False when the store was away (the end is
        then still to be saved). Any answer counts as saved: an end already there,
        or a lease another process holds now (its owner ends the session)."""
        o = self.journal.ownership
        try:
            await self._store.close_session(o.session_id, o.owner, o.incarnation, state=state)
        except StoreUnavailable as exc:
            log.warning("session %s: close not persisted: %s; retrying until the store "
                        "answers", self._sid, exc)
            return False
        except DuplexError as exc:
            log.warning("session %s: close not persisted: %s", self._sid, exc)
        return True

    async def refuse_late(self, items: Sequence[object]) -> None:
        """Whatever the client sent after the end gets a clear refusal, with its id
        (audio needs none: an append has no answer); a socket waiting to attach hears
        the session ended."""
        for item in items:
            if isinstance(item, c.AppendAudio):
                continue
            if isinstance(item, c.Command):
                await self.send_unjournaled(SessionStateError(
                    "the session is closed", code="session_closed", event_id=item.event_id))
            elif isinstance(item, Attach) and not item.done.done():
                item.done.set_exception(SessionStateError(
                    "the session has ended", code="session_resume_expired"))

    async def hang_up(self, code: CloseCode, reason: str, *, linger_s: float = 0.0) -> None:
        attachment = self.attachment
        if attachment is not None:
            await attachment.end(code, reason, linger_s=linger_s)

    async def lease_lost(self, exc: LeaseLost) -> None:
        """Another process owns the session now (I3): the client hears why, unjournaled."""
        attachment = self.attachment
        if attachment is not None:
            await self.send_unjournaled(exc)
            await attachment.end(CloseCode.LEASE_LOST, "lease lost")


def _retrieved(task: asyncio.Future[bool] | asyncio.Future[None]) -> None:
    """A task given up on: its error, if it had one, is not worth a warning."""
    if not task.cancelled():
        task.exception()
