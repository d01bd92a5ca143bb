"""One runner per session: its mailbox, its TaskGroup, and the I/O its core asks for.

The worker takes one mailbox item at a time (control first, I7), feeds the
sans-I/O core, then executes the core's effects in order: journal-and-send
events, stage submits and aborts, history writes. Reply audio waits in
``gateway.session.paced_audio`` until due; a cancel purges whatever of the old epoch it
or the mailbox still holds, so none of it reaches the client after the
``response.done{cancelled}`` (I2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from duplex import attach as at
from duplex import commands as c
from duplex import effects as fx
from duplex.close_codes import CloseCode
from duplex.dispatch import apply_command
from duplex.errors import (
    CapacityError,
    DuplexError,
    LeaseLost,
    SessionStateError,
    StoreUnavailable,
)
from duplex.events import ServerEvent, event
from duplex.fence import Fence, is_current_epoch
from duplex.session import SessionCore
from duplex.store.base import EndState, SessionRecord, SessionStore
from engines.base import StageOutput
from gateway.log_limits import LogLimiter
from gateway.metrics import Metrics
from gateway.session import runner_items as ri
from gateway.session import socket_changes
from gateway.session.emitter import Attachment, Emitter, outbound, unjournaled_error
from gateway.session.history_writes import HistoryWrites, Write
from gateway.session.mailbox import Lane, Mailbox
from gateway.session.paced_audio import PacedAudio
from gateway.session.reply_feed import ReplyFeed
from gateway.session.session_timers import SessionTimers
from gateway.session.user_audio import UserAudio
from gateway.session_orchestrator import DuplexOrchestrator
from plugins import base as pb

log = logging.getLogger(__name__)

LINGER_S = 2.0  # after the terminal, late commands are refused this long, then close
MAX_REASON_CHARS = 256  # a client's session.close reason, as the terminal repeats it (I8)


class SessionRunner:
    def __init__(self, core: SessionCore, emitter: Emitter, store: SessionStore,
                 orchestrator: DuplexOrchestrator, plugin: pb.DuplexModelPlugin,
                 metrics: Metrics, limits: ri.RunnerLimits) -> None:
        self.core = core
        self.emitter = emitter
        self.store = store
        self.orch = orchestrator
        self.plugin = plugin
        self.metrics = metrics
        self.limits = limits
        caps = plugin.capabilities
        self.mailbox = Mailbox({Lane.URGENT: 0, Lane.CONTROL: limits.max_pending_commands,
                                Lane.EVENTS: limits.max_pending_events,
                                Lane.MEDIA: limits.max_pending_audio})
        self._paced = PacedAudio(limits.lead_ms, limits.max_pending_audio, caps.output_rate)
        self.plan = plugin.plan()  # which stage hears what: the plugin's to say
        self._view = ri.CoreView(core)
        self.user_audio = UserAudio(core, plugin, self.plan, self._view)
        self.clock = ri.ReplyClock()
        self._warn = LogLimiter(log)  # what a client can trigger at will: one line a while
        self._renewed_at = 0.0
        self.taken_at_once = 0  # appends handled without the worker (_append_now), for tests
        self._history = HistoryWrites(core, emitter, store)
        self.recovery: at.Recovery | None = None  # said in the next session.resumed
        self.record: SessionRecord | None = None  # as restored from Redis, if it was
        self.opened_at: float | None = None  # when the session opened (its lifetime's start)
        self.timers = SessionTimers(self.mailbox)
        self.replies = ReplyFeed(core, self.user_audio.io, caps.output_rate, self.clock,
                                 self.timers, metrics)
        self.task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.on_closed: list[Any] = []
        emitter.on_send_failed = self.request_detach

    @property
    def session_id(self) -> str:
        return self.core.fence.session_id

    # -- inputs from the socket and the orchestrator ----------------------------------

    def submit(self, cmd: c.Command) -> None:
        """Queue a client command; raises ``CapacityError`` when the session is flooded.

        A cancel or close goes ahead of the audio still queued (I7)."""
        if isinstance(cmd, ri.OVERTAKE_AUDIO):
            self.mailbox.put_ahead(Lane.CONTROL, cmd, of=ri.is_audio)
        elif not (isinstance(cmd, c.AppendAudio) and self._append_now(cmd.audio)):
            self.mailbox.put(Lane.CONTROL, cmd)

    def _append_now(self, data: bytes) -> bool:
        """An append taken here, without waking the worker, when the worker waits with
        nothing queued: it would handle it next, and its handling is synchronous up
        to the VAD's events and the plan's payloads, which (if any) are queued for the
        worker as one ``ri.Heard``. False when it must be queued instead: the worker is
        busy, a lease renewal is due, or the audio is bad (the worker refuses it)."""
        if not self.mailbox.idle or self.closed.is_set() or self._renew_due(time.time()):
            return False
        try:
            pcm = self.user_audio.io.decode(data)
        except DuplexError:
            return False
        self.taken_at_once += 1
        heard = self.user_audio.hear(pcm)
        if heard is not None:
            self.mailbox.put(Lane.CONTROL, heard)
        return True

    def report(self, error: DuplexError) -> None:
        """Queue an error for the client, in order with the events before it."""
        try:
            self.mailbox.put(Lane.CONTROL, ri.ClientError(error))
        except CapacityError:
            self._warn.warning("dropped-error", "session %s: dropped error %s (mailbox full)",
                               self.session_id, error.code)

    def request_close(self, reason: str, *,
                      terminal: ServerEvent = ServerEvent.SESSION_CLOSED) -> None:
        self.mailbox.put_urgent(ri.Close(reason, terminal))

    def client_closed(self, reason: str) -> None:
        """The client ended the session (a 1000 close, Twilio's ``stop``): handled
        after everything it sent before, except its queued audio (I7)."""
        self.mailbox.put_ahead(Lane.CONTROL, ri.Close(reason), of=ri.is_audio,
                               refusable=False)

    def request_expire(self, reason: str) -> None:
        self.request_close(reason, terminal=ServerEvent.SESSION_EXPIRED)

    def request_detach(self, attachment: Attachment) -> None:
        self.mailbox.put_urgent(ri.Detach(attachment))

    def confirm_token(self, generation: int) -> None:
        self.mailbox.put_urgent(ri.Confirm(generation))

    def recover(self, lost_response_id: str | None) -> None:
        """This process took the session over after its owner died (docs/architecture.md §8)."""
        self.recovery = at.Recovery(lost_response_id)
        self.mailbox.put_urgent(self.recovery)

    async def attach(self, attachment: Attachment, *, resume_token: str,
                     cursor: int | None) -> bool:
        """Make ``attachment`` the session's socket; for a resume, replay from ``cursor``.
        False when the resume was refused after all (``duplex.attach``: a journal gap).

        Runs on the worker, so nothing interleaves with the replay.
        """
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.mailbox.put_urgent(ri.Attach(attachment, resume_token, cursor, done))
        return await done

    def serves(self, attachment: Attachment) -> bool:
        """``attachment`` is the session's socket (not replaced, ended or detached)."""
        return self.emitter.attachment is attachment

    def let_go(self) -> Attachment | None:
        """This process stops: the socket is no longer the session's (it is returned,
        for its endpoint to close), while the session stays resumable."""
        attachment, self.emitter.attachment = self.emitter.attachment, None
        return attachment

    async def refuse_late(self, error: DuplexError) -> None:
        """Answer a command read after the end, outside the journal: the worker is
        done, so the reader may write."""
        await self.emitter.send_unjournaled(error)

    def current_fence(self) -> Fence:
        return self.core.fence

    def on_stage_output(self, out: StageOutput) -> None:
        assert out.result is not None
        for delta in self.plugin.project(out.stage, out.result.payload):
            item = ri.Delta(out.tag, delta)
            if isinstance(delta, pb.Transcript):
                self._put(Lane.EVENTS, item)
            elif not self._paced.offer(item):
                self._put(Lane.CONTROL, ri.Failure(out.tag, "output_backpressure", out.stage))

    def on_stage_failure(self, fence: Fence, message: str, stage: int) -> None:
        self._put(Lane.CONTROL, ri.Failure(fence, message, stage))

    def _put(self, lane: Lane, item: Any) -> None:
        try:
            self.mailbox.put(lane, item)
        except CapacityError:
            self._warn.warning(f"full-{lane.name}", "session %s: %s lane full; dropping",
                               self.session_id, lane.name)

    # -- the session's task group ---------------------------------------------------

    async def run(self) -> None:
        self.timers.start_lifetime(self.opened_at, self.limits.max_session_s,
                                   lambda: self.request_expire(at.MAX_DURATION))
        async with asyncio.TaskGroup() as tg:
            pacer = tg.create_task(self._paced.run(lambda item: self._put(Lane.MEDIA, item)),
                                   name=f"pace-{self.session_id}")
            try:
                await self._work()
            finally:
                pacer.cancel()
                self.timers.cancel()

    async def _work(self) -> None:
        while not self.closed.is_set():
            item = await self.mailbox.get()
            try:
                await self._handle(item)
            except LeaseLost as exc:
                await self._lose_lease(exc)
            except DuplexError as exc:
                await self._refused(item, exc)
            except Exception as exc:
                if not isinstance(item, c.Command):
                    raise  # the runner's own item: gateway._run fails the session
                # one command's bug must not end the session (nor flood the log)
                self._warn.warning("command-bug", "session %s: %s failed", self.session_id,
                                   type(item).__name__, exc_info=True)
                await self._refused(item, DuplexError(
                    f"the server failed to handle this event: {type(exc).__name__}",
                    code="internal_error"))

    async def _refused(self, item: Any, exc: DuplexError) -> None:
        """``item`` failed with ``exc``: its waiter, or the client, hears why."""
        if isinstance(item, c.Command) and exc.event_id is None:
            exc.event_id = item.event_id
        if isinstance(item, ri.Attach) and not item.done.done():
            item.done.set_exception(exc)
            return
        try:
            await self._publish_error(exc)
        except LeaseLost as lost:
            await self._lose_lease(lost)

    async def _publish_error(self, exc: DuplexError) -> None:
        await self.emitter.publish([event(ServerEvent.ERROR, error=exc.to_wire())])

    async def _handle(self, item: Any) -> None:
        if isinstance(item, c.AppendAudio):  # 50 a second a session: straight there
            await self._renew(force=False)
            await self._append(item.audio)
            await self._run_effects()
            return
        if isinstance(item, ri.Heard):  # the rest of an append taken at once
            await self._heard(item)
            await self._run_effects()
            return
        if isinstance(item, c.Command):
            await self._renew(force=isinstance(item, c.Heartbeat))
        match item:
            case ri.Attach():
                await socket_changes.attach(self, item)
                return
            case ri.Detach():
                await socket_changes.detach(self, item.attachment)
                return
            case at.Recovery(lost_response_id=lost) if lost is not None:
                await self.emitter.publish([at.lost_response_done(lost)])
                return
            case at.Recovery():
                return
            case ri.Confirm():
                try:
                    await self.store.confirm_token(self.session_id, item.generation)
                except StoreUnavailable as exc:  # the spent token stays usable a while
                    log.info("session %s: token not confirmed: %s", self.session_id, exc)
                return
            case c.UpdateSession():
                apply_command(self.core, item)
                self.user_audio.reconfigure()
            case c.AckEvents():
                await self.store.trim_journal(self.session_id, min(
                    item.server_event_seq, self.emitter.last_seq))
                return
            case c.CloseSession():
                await self.shutdown(item.reason)
                return
            case c.ResumeSession():
                raise SessionStateError("session.resume must be the first message",
                                        code="invalid_session_resume")
            case c.Command():
                apply_command(self.core, item)
            case ri.ClientError():
                await self._publish_error(item.error)
                return
            case ri.Close():
                await self.shutdown(item.reason, terminal=item.terminal)
                return
            case ri.Failure():
                self.plan.stage_failed(item.stage)
                self.core.stage_failed(item.fence.with_turn(self.core.fence.turn_id),
                                       item.message)
            case ri.Delta():
                self.replies.feed(item)
            case ri.IdleElapsed():
                self.core.idle_elapsed(item.token)
        await self._run_effects()

    def note_stage_latency(self, stage: int, seconds: float) -> None:
        """A stage's time from an input to its first output (for ``timings_ms``)."""
        name = self.plan.reply_timings.get(stage)
        if name is not None:
            self.clock.stage(name, seconds)

    # -- user audio (``gateway.session.user_audio``) ------------------------------------------

    async def _append(self, data: bytes) -> None:
        heard = self.user_audio.hear(self.user_audio.io.decode(data))
        if heard is not None:
            await self._heard(heard)

    async def _heard(self, heard: ri.Heard) -> None:
        """An append's VAD events, then its audio for the plan (which the VAD's turn
        end may have changed, so it is planned after them)."""
        for vad_event in heard.vad_events:
            if vad_event.started:
                self.core.speech_started(vad_event.audio_ms)
            else:
                self.core.speech_stopped(vad_event.audio_ms)
            await self._run_effects()
        submissions = heard.submissions
        if submissions is None:
            submissions = self.plan.audio(heard.pcm, self._view)
        await self._submit(submissions)

    async def _submit(self, submissions: Sequence[pb.Submit]) -> None:
        """Execute the plan: each payload goes to its stage's request of the live epoch."""
        for sub in submissions:
            await self.orch.submit(sub.stage, self.core.fence, sub.payload)

    # -- effects -------------------------------------------------------------------

    async def _run_effects(self) -> None:
        """The core's effects in order, but for its history and config writes: those
        go out with the events journaled next, at the same time (one pipeline,
        ``duplex.store.batch``), and the events on either side of them in one
        append. Nothing a client hears waits on such a write; every other effect
        runs after the events and writes before it."""
        batch: list[dict[str, Any]] = []
        held: list[Write] = []
        for effect in self.core.effects():
            if isinstance(effect, fx.Emit):
                batch.append(self.clock.stamp(effect.event))
            elif isinstance(effect, Write):
                held.append(effect)
            else:
                await self._history.publish_with(batch, held)
                batch, held = [], []
                await self._execute(effect)
        await self._history.publish_with(batch, held)
        await self._save_epochs()

    async def _execute(self, effect: fx.Effect) -> None:
        match effect:
            case fx.CommitAudio() | fx.DiscardAudio() | fx.StartResponse() | fx.ContextChanged():
                if isinstance(effect, fx.StartResponse) or (
                        isinstance(effect, fx.CommitAudio) and effect.respond):
                    self.clock.start()
                    self.timers.reply_started()
                await self._submit(self.plan.effect(effect, self._view))
            case fx.IdleTimer():
                self.timers.start_idle(effect)
            case fx.AbortEpoch():
                await self._abort_epoch(effect.cancelled)
                if not self.core.closed:  # the new epoch starts where the plan says
                    await self._submit(self.plan.effect(effect, self._view))

    async def _abort_epoch(self, cancelled: Fence) -> None:
        await self.orch.abort_epoch(cancelled)
        live = self.core.fence
        self._paced.drop_stale(live)
        self.mailbox.purge(Lane.MEDIA, lambda d: is_current_epoch(live, d.fence))
        self.user_audio.io.reset_output()  # its epoch is stored by _save_epochs

    async def _save_epochs(self) -> None:
        """The epoch bumps of the cancels (I2) that no journal append has stored. An
        append raises the stored epoch to the session's (``append_events.lua``), so a
        cancel followed by events (its ``response.done``) needs no write of its own;
        one that is not (a close mid-reply) is bumped here, once per cancel."""
        emitter = self.emitter
        while emitter.stored_epoch < self.core.fence.epoch:
            try:
                emitter.stored_epoch = await self.store.bump_epoch(
                    self.session_id, emitter.owner, emitter.incarnation, emitter.stored_epoch)
            except StoreUnavailable as exc:
                log.warning("session %s: epoch bump not persisted: %s", self.session_id, exc)
                return

    # -- attachments and the lease ----------------------------------------------------

    async def _renew(self, *, force: bool) -> None:
        """Renew the lease at most every ``renew_every_s``; a journal append renews it
        too (append_events.lua touches it as renew.lua does), so only a session that
        journaled nothing lately makes this round trip."""
        now = time.time()
        if not force and not self._renew_due(now):
            return
        self._renewed_at = now
        try:
            await self.store.renew(self.session_id, self.emitter.owner,
                                   self.emitter.incarnation, now)
        except StoreUnavailable as exc:
            log.info("session %s: lease not renewed: %s", self.session_id, exc)
        except SessionStateError as exc:  # ended or vanished under us
            raise LeaseLost(f"the session is gone from the store: {exc.message}") from exc

    def _renew_due(self, now: float) -> bool:
        return now - max(self._renewed_at, self.emitter.renewed_at) >= self.limits.renew_every_s

    async def _lose_lease(self, exc: LeaseLost) -> None:
        """Another process owns the session now (I3): stop serving it, write nothing."""
        log.warning("session %s: %s; stopping here", self.session_id, exc)
        self.core.close("lease_lost")
        self.core.effects()
        await self.orch.detach(self.core.fence)
        self.closed.set()
        if self.emitter.attachment is not None:
            await self.emitter.send_unjournaled(exc)
            await self.emitter.attachment.end(CloseCode.LEASE_LOST, "lease lost")
        self._finish()

    # -- the end ---------------------------------------------------------------------

    async def shutdown(self, reason: str, *,
                       terminal: ServerEvent = ServerEvent.SESSION_CLOSED) -> None:
        """Stage cleanup first, then exactly one terminal event (I5), journaled, then
        the slot freed, then the terminal sent: a client that reopens the moment it
        hears the terminal finds the slot free (R9)."""
        if self.closed.is_set():
            return
        self.core.close(reason)
        await self._run_effects()
        await self.orch.detach(self.core.fence)
        final = event(terminal, reason=reason[:MAX_REASON_CHARS])
        expired = terminal is ServerEvent.SESSION_EXPIRED
        state: EndState = "expired" if expired else "closed"
        # a connected client hears it as OpenAI's error too (a detached one is gone)
        told = expired and self.emitter.attachment is not None
        ending = [at.expired_error(reason, self.limits.max_session_s), final] if told \
            else [final]
        try:  # a journaled terminal frees the slot before it is sent
            journaled = await self.emitter.publish(
                ending, before_send=lambda: self._close_in_store(state))
        except DuplexError as exc:  # e.g. another process claimed it meanwhile
            log.warning("session %s: terminal not journaled: %s", self.session_id, exc)
            journaled = False
        if not journaled:
            await self._close_in_store(state)
            for ended in ending:
                await self.emitter.send(outbound(ended))
        self.closed.set()
        await self._refuse_queued()
        if self.emitter.attachment is not None:
            await self.emitter.attachment.end(CloseCode.NORMAL, reason, linger_s=LINGER_S)
        self._finish()

    async def _close_in_store(self, state: EndState) -> None:
        try:
            await self.store.close_session(self.session_id, self.emitter.owner,
                                           self.emitter.incarnation, state=state)
        except DuplexError as exc:
            log.warning("session %s: close not persisted: %s", self.session_id, exc)

    async def _refuse_queued(self) -> None:
        """Whatever the client sent after the end gets a clear refusal, with its id
        (audio needs none: an append has no answer)."""
        for item in [*self.mailbox.drain(Lane.URGENT), *self.mailbox.drain(Lane.CONTROL)]:
            if isinstance(item, c.AppendAudio):
                continue
            if isinstance(item, c.Command):
                await self.emitter.send_unjournaled(SessionStateError(
                    "the session is closed", code="session_closed", event_id=item.event_id))
            elif isinstance(item, ri.Attach) and not item.done.done():
                item.done.set_exception(SessionStateError(
                    "the session has ended", code="session_resume_expired"))

    async def abandon(self, *, failed: bool = False) -> None:
        """Stop serving here without ending the session (this process is stopping or
        the runner failed): the lease stays in Redis for a resume or the reaper."""
        await self.orch.detach(self.core.fence)
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
