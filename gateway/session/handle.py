"""A session as its transports, the gateway and the orchestrator see it.

What they may ask of a session is here, and none of it waits: a request is put
in the session's inbox for its worker (``gateway.session.runner``), which takes
it in lane order with everything else (a parked worker is handed a client
command at once, as a call); the few reads (is this socket still the session's?
the current fence) look at the outbox and the machine. Apart from the loop, so
that the runner is only the loop, and what a transport may do to a session is
one short page (its protocol: ``gateway.transports.session.Session``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from duplex import attach as at
from duplex import commands as c
from duplex.errors import DuplexError
from duplex.events import ServerEvent
from duplex.fence import Fence
from duplex.session import SessionCore
from engines.base import StageOutput
from gateway.session import items as si
from gateway.session.attachment import Attachment
from gateway.session.inbox import Inbox, Lane
from gateway.session.machine import SessionMachine
from gateway.session.outbox import Outbox
from plugins import base as pb


class SessionHandle:
    def __init__(self, inbox: Inbox, outbox: Outbox, machine: SessionMachine,
                 plugin: pb.DuplexModelPlugin) -> None:
        self.inbox = inbox
        self.outbox = outbox
        self.machine = machine
        self.plugin = plugin
        # Queue a client command; raises ``CapacityError`` when the session is
        # flooded. A cancel or close goes ahead of the audio still queued (I7). The
        # inbox's own method, not one that forwards to it: 50 calls a second a session.
        self.submit: Callable[[c.Command], None] = inbox.command
        # the session's end is under way (its client ended it, or it is shutting
        # down): from here no socket attaches, not even one queued before
        self.ending = False

    @property
    def core(self) -> SessionCore:
        return self.machine.core

    # -- what the transports and the gateway may ask ------------------------------------

    def report(self, error: DuplexError) -> None:
        """Queue an error for the client, in order with the events before it."""
        self.inbox.offer(Lane.CONTROL, si.ClientError(error))

    def request_close(self, reason: str, *,
                      terminal: ServerEvent = ServerEvent.SESSION_CLOSED) -> None:
        self.inbox.put_urgent(si.Close(reason, terminal))

    def client_closed(self, reason: str) -> None:
        """The client ended the session (a 1000 close, Twilio's ``stop``): handled
        after everything it sent before, except its queued audio (I7). No resume
        gets the session back from now on, even one that reaches the worker
        before the close does (an attach is urgent; a worker waiting on a
        stalled store takes it first)."""
        self.ending = True
        self.inbox.client_closed(reason)

    def request_expire(self, reason: str) -> None:
        self.request_close(reason, terminal=ServerEvent.SESSION_EXPIRED)

    def request_detach(self, attachment: Attachment) -> None:
        self.inbox.detach(attachment)

    def confirm_token(self, generation: int) -> None:
        self.inbox.put_urgent(si.Confirm(generation))

    def played(self, response_id: str) -> None:
        """The peer has played some of ``response_id``'s audio (a carrier's mark, the
        WebRTC track): timed now, not queued (a time, nothing to act on)."""
        self.machine.replies.played(response_id)

    def recover(self, lost_response_id: str | None) -> None:
        """This process took the session over after its owner died (docs/architecture.md §8)."""
        recovery = at.Recovery(lost_response_id)
        self.outbox.recovered(recovery)
        self.inbox.put_urgent(recovery)

    async def attach(self, attachment: Attachment, *, resume_token: str,
                     cursor: int | None) -> bool:
        """Make ``attachment`` the session's socket; for a resume, replay from ``cursor``.
        False when the resume was refused after all (``duplex.attach``: a journal gap).
        Runs on the worker, so nothing interleaves with the replay."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.inbox.put_urgent(si.Attach(attachment, resume_token, cursor, done))
        return await done

    def serves(self, attachment: Attachment) -> bool:
        """``attachment`` is the session's socket (not replaced, ended or detached)."""
        return self.outbox.attachment is attachment

    def dropped(self, attachment: Attachment) -> bool:
        """``attachment`` stopped serving the session without another socket taking
        its place (a send to it failed): how its peer closes it still counts."""
        return self.outbox.dropped(attachment)

    def forget(self, attachment: Attachment) -> None:
        """``attachment``'s socket is done (ended, its reader gone): the session
        holds it no longer."""
        self.outbox.forget(attachment)

    def let_go(self) -> Attachment | None:
        """This process stops: the socket is no longer the session's (it is returned,
        for its endpoint to close), while the session stays resumable."""
        return self.outbox.let_go()

    async def refuse_late(self, error: DuplexError) -> None:
        """Answer a command read after the end, outside the journal: the worker is
        done, so the reader may write."""
        await self.outbox.send_unjournaled(error)

    # -- what the orchestrator may (``gateway.session_orchestrator.SessionSink``) ---------

    def current_fence(self) -> Fence:
        return self.machine.core.fence  # asked for every stage output: one call, not two

    def on_stage_output(self, out: StageOutput) -> None:
        assert out.result is not None
        # the reply's steps are timed as they arrive, in the stages' order
        deltas = self.machine.timings.arrived(self.plugin.project(out.stage, out.result.payload))
        if deltas:
            self.inbox.stage_output(out.tag, out.stage, deltas)

    def on_stage_failure(self, fence: Fence, message: str, stage: int) -> None:
        self.inbox.offer(Lane.CONTROL, si.Failure(fence, message, stage))

    def note_stage_latency(self, stage: int, seconds: float) -> None:
        self.machine.note_stage_latency(stage, seconds)
