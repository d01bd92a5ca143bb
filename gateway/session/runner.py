"""One runner per session: the loop between its inbox, its machine and its outbox.

Everything the session is to handle arrives in its inbox (``gateway.session.inbox``:
client commands from the socket, stage output from the orchestrator, timers,
socket changes); the worker takes one item at a time (control first, I7), the
session machine (``gateway.session.machine``) turns it into actions, and the
worker carries those out, in order: through the outbox (journal, then send: I4;
store writes), the orchestrator (stage submits and aborts) or the inbox itself
(a cancel's purge of the old epoch's media: I2; timers). When nothing is ready
the worker parks: the inbox hands it what comes (``_take``: a client command at
once, anything else at the end of that loop turn), and its task resumes only
with an item's actions that must wait. What the transports, the gateway and
the orchestrator may ask of a session (each only puts in the inbox) is its
``gateway.session.handle.SessionHandle``, which the runner is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.errors import DuplexError, LeaseLost
from duplex.events import ServerEvent, event
from duplex.session import SessionCore
from duplex.store.base import EndState, SessionRecord
from gateway.log_limits import LogLimiter
from gateway.metrics import Metrics
from gateway.session import actions as a
from gateway.session import items as si
from gateway.session.actions import ONLY_RENEW
from gateway.session.attachment import outbound, unjournaled_error
from gateway.session.clock import Clock
from gateway.session.handle import SessionHandle
from gateway.session.inbox import Inbox, Lane
from gateway.session.journal import Journal
from gateway.session.machine import SessionMachine
from gateway.session.outbox import Outbox
from gateway.session_orchestrator import DuplexOrchestrator
from plugins import base as pb

log = logging.getLogger(__name__)

LINGER_S = 2.0  # after the terminal, late commands are refused this long, then close


class SessionRunner(SessionHandle):
    """The session's worker: its loop, and its end. What others may ask of it is
    its ``SessionHandle`` part."""

    def __init__(self, core: SessionCore, journal: Journal, orchestrator: DuplexOrchestrator,
                 plugin: pb.DuplexModelPlugin, metrics: Metrics, limits: si.SessionLimits,
                 clock: Clock) -> None:
        inbox = Inbox(f"session {journal.session_id}", limits, clock,
                      plugin.capabilities.output_rate)
        super().__init__(
            inbox,
            # the inbox's, not the runner's (``request_detach``): the runner holds the
            # outbox, and a reference back would keep an ended session's state until
            # a full collection (gateway/heap.py)
            Outbox(journal, fence=lambda: core.fence, on_send_failed=inbox.detach,
                   metrics=metrics, clock=clock),
            SessionMachine(core, plugin, metrics, clock), plugin)
        self.orch = orchestrator
        self.limits = limits
        self._journal = journal  # the outbox's: when it last renewed the lease
        self._wall = clock.wall
        self.session_id = journal.session_id
        self.opened_at: float | None = None  # when the session opened (its lifetime's start)
        self.record: SessionRecord | None = None  # as restored from Redis, if it was
        self.task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.on_closed: list[Callable[[SessionRunner], None]] = []
        # the end the store did not take (it was away): the gateway retries it
        self.unsaved_end: EndState | None = None
        self._warn = LogLimiter(log)  # what a client can trigger at will: one line a while

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        if self.limits.max_session_s and self.opened_at is not None:
            self.inbox.expire_at(self.opened_at + self.limits.max_session_s)
        try:
            while not self.closed.is_set():
                rest = self._take(None)
                if rest is None:  # parked: the inbox hands items to _take as they come
                    rest = await self.inbox.wait(self._take)
                await rest
        finally:
            self.inbox.close()

    def _take(self, item: Any) -> Awaitable[None] | None:
        """Take ``item`` (a command the inbox handed over, or None), then the items
        ready now, each as far as its actions go without a wait; the rest of the
        first that must wait, to await (None: nothing is left)."""
        if self.closed.is_set():  # set only by awaited work (the end), never during this
            return None
        ready, take = self.inbox.ready, self.machine.take
        if item is None:
            item = ready()
        while item is not None:
            try:
                actions = take(item)
                # an append's, nearly always: its lease check is this comparison (as
                # _carry_out's for Renew), with no iterator and no call (50 a second)
                if actions is not ONLY_RENEW or (self._wall() - self._journal.renewed_at
                                                 >= self.limits.renew_every_s):
                    actions = iter(actions)
                    for action in actions:
                        pending = self._carry_out(action)
                        if pending is not None:
                            return self._rest_of(item, pending, actions)
            except Exception as exc:
                return self._failed(item, exc)
            item = ready()
        return None

    async def _rest_of(self, item: Any, pending: Awaitable[object],
                       actions: Iterator[a.Action]) -> None:
        """An item's actions from the first that waits (``pending``) on."""
        try:
            await pending
            for action in actions:
                pending_next = self._carry_out(action)
                if pending_next is not None:
                    await pending_next
        except Exception as exc:
            await self._failed(item, exc)

    def _carry_out(self, action: a.Action) -> Awaitable[object] | None:
        """What ``action`` takes: done here if it needs no wait, else the awaitable
        that does it (an append's lease check, 50 a second, makes no coroutine)."""
        match action:
            case a.Renew():  # an append's (50 a second): a comparison, until one is due
                if (action.force or self._wall() - self._journal.renewed_at
                        >= self.limits.renew_every_s):
                    return self.outbox.renew()
                return None
            case a.Publish():
                return self.outbox.publish(action.events, action.writes)
            case a.Submit():
                return self._submit(action)
            case a.Abort():
                return self._abort(action)
            case a.StartIdle():
                self.inbox.idle_at(action.when, action.token)
                return None
            case a.KeepEpoch():
                return self.outbox.keep_epoch(action.epoch)
            case a.Trim():
                return self.outbox.trim(action.acked)
            case a.AttachSocket() if self.ending:  # the client ended it: never back
                return self.outbox.refuse_late([action.item])
            case a.AttachSocket():
                return self.outbox.attach(action.item, action.session)
            case si.Detach():
                return self.outbox.detach(action.attachment)
            case si.Confirm():
                return self.outbox.confirm_token(action.generation)
            case si.Close():
                return self.shutdown(action.reason, terminal=action.terminal)

    async def _submit(self, action: a.Submit) -> None:
        for sub in action.submissions:
            await self.orch.submit(sub.stage, action.fence, sub.payload)

    async def _abort(self, action: a.Abort) -> None:
        await self.orch.abort_epoch(action.cancelled)
        self.inbox.drop_stale(action.live)

    async def _failed(self, item: Any, exc: Exception) -> None:
        """``item`` failed: its waiter, or the client, hears why; a lost lease stops
        the session here (I3)."""
        if isinstance(exc, LeaseLost):
            await self._lose_lease(exc)
            return
        if not isinstance(exc, DuplexError):
            if not isinstance(item, c.Command):
                raise exc  # the runner's own item: gateway._run fails the session
            # one command's bug must not end the session (nor flood the log)
            self._warn.warning("command-bug", "session %s: %s failed", self.session_id,
                               type(item).__name__, exc_info=exc)
            exc = DuplexError(f"the server failed to handle this event: {type(exc).__name__}",
                              code="internal_error")
        if isinstance(item, c.Command) and exc.event_id is None:
            exc.event_id = item.event_id
        if isinstance(item, si.Attach) and not item.done.done():
            item.done.set_exception(exc)
            return
        try:
            await self.outbox.publish([event(ServerEvent.ERROR, error=exc.to_wire())])
        except LeaseLost as lost:
            await self._lose_lease(lost)

    # -- the end ---------------------------------------------------------------------------

    async def shutdown(self, reason: str, *,
                       terminal: ServerEvent = ServerEvent.SESSION_CLOSED) -> None:
        """Stage cleanup first, then exactly one terminal event (I5); then whatever
        the client sent after it is refused, and the socket lingers a while for
        late commands."""
        if self.closed.is_set():
            return
        self.ending = True
        for action in self.machine.close(reason):
            pending = self._carry_out(action)
            if pending is not None:
                await pending
        await self.orch.detach(self.machine.fence)
        self.unsaved_end = await self.outbox.say_terminal(terminal, reason,
                                                          self.limits.max_session_s)
        self.closed.set()
        await self.outbox.refuse_late(
            [*self.inbox.drain(Lane.URGENT), *self.inbox.drain(Lane.CONTROL)])
        await self.outbox.hang_up(CloseCode.NORMAL, reason, linger_s=LINGER_S)
        self._finish()

    async def _lose_lease(self, exc: LeaseLost) -> None:
        """Another process owns the session now (I3): stop serving it, write nothing."""
        log.warning("session %s: %s; stopping here", self.session_id, exc)
        self.machine.lose()
        await self.orch.detach(self.machine.fence)
        self.closed.set()
        await self.outbox.lease_lost(exc)
        self._finish()

    async def abandon(self, *, failed: bool = False) -> None:
        """Stop serving here without ending the session (this process is stopping or
        the runner failed): the lease stays in Redis for a resume or the reaper."""
        await self.orch.detach(self.machine.fence)
        self.closed.set()
        attachment = self.let_go()
        if attachment is not None and failed:
            error = DuplexError("the session failed on this server; resume it",
                                code="internal_error")
            with contextlib.suppress(Exception):
                await attachment.send(outbound(unjournaled_error(error)))
            await attachment.end(CloseCode.INTERNAL_ERROR, "session failed")
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self._finish()

    def _finish(self) -> None:
        for callback in self.on_closed:
            callback(self)
