"""A client's 1000 close against a resume that races it (issue 27), set up exactly.

An attach is urgent and a client's close is not (it waits behind the commands the
client sent before it, I7), so a worker that is busy when both arrive (on a
stalled store, in the soak) takes the attach first. The client said 1000: the
resume is refused as an ended session's, however the two meet in the inbox.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harness import MemorySocket, connect
from starlette.applications import Starlette

from duplex.fence import Fence
from gateway.gateway import Gateway
from gateway.session.inbox import Lane
from gateway.session.runner import SessionRunner


class HeldSubmits:
    """The orchestrator, but a stage submit waits until ``release``: the session's
    worker is then busy, as on a stalled store, while the test queues its inbox."""

    def __init__(self, orchestrator: Any) -> None:
        self._orchestrator = orchestrator
        self.held = asyncio.Event()
        self._released = asyncio.Event()

    def release(self) -> None:
        self._released.set()

    async def submit(self, stage: int, fence: Fence, payload: Any) -> None:
        self.held.set()
        await self._released.wait()
        await self._orchestrator.submit(stage, fence, payload)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orchestrator, name)


async def busy_session(app: Starlette, gateway: Gateway) -> tuple[
        MemorySocket, dict[str, Any], SessionRunner, HeldSubmits]:
    """A session whose worker waits on a stage submit."""
    s = await connect(app)
    created = await s.until("session.created")
    runner = gateway.runners[created["session"]["id"]]
    held = HeldSubmits(runner.orch)
    runner.orch = held  # type: ignore[assignment]
    s.send({"type": "response.create"})
    await asyncio.wait_for(held.held.wait(), 10)
    return s, created, runner, held


async def resume(app: Starlette, created: dict[str, Any]) -> MemorySocket:
    socket = await connect(app, query=f"resume={created['session']['id']}")
    socket.send({"type": "session.resume", "resume_token": created["resume_token"],
                 "last_received_server_event_seq": created["server_event_seq"]})
    return socket


async def refused(socket: MemorySocket) -> None:
    first = await socket.recv()
    assert first["type"] == "error", f"a session its client closed resumed: {first}"
    assert first["error"]["code"] == "session_resume_expired", first
    assert await socket.close_code() == 1008


async def ended_in_store(gateway: Gateway, sid: str) -> None:
    for _ in range(1000):  # the end has no event the test can read: a bounded poll
        record = await gateway.store.get(sid)
        if record is not None and record.state == "closed":
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the session never ended in the store")


async def test_a_resume_after_the_clients_1000_waits_for_nothing_and_is_refused(
        app: tuple[Starlette, Gateway]) -> None:
    application, gateway = app
    s, created, runner, held = await busy_session(application, gateway)
    s.drop(1000)  # the close waits behind the busy worker
    await asyncio.wait_for(s.task, 10)  # the endpoint has read it
    assert runner.ending and not runner.closed.is_set()
    b = await resume(application, created)
    await refused(b)
    held.release()
    await asyncio.wait_for(runner.closed.wait(), 10)
    await ended_in_store(gateway, created["session"]["id"])


async def test_a_resume_queued_ahead_of_the_clients_1000_is_refused(
        app: tuple[Starlette, Gateway]) -> None:
    application, gateway = app
    s, created, runner, held = await busy_session(application, gateway)
    b = await resume(application, created)
    for _ in range(1000):  # the resume's attach has no event of its own: a bounded poll
        if runner.inbox.held(Lane.URGENT):
            break
        await asyncio.sleep(0.01)
    assert runner.inbox.held(Lane.URGENT) == 1  # the attach, queued: the worker is busy
    s.drop(1000)  # the client's close, queued behind it
    await asyncio.wait_for(s.task, 10)
    held.release()  # the worker takes the attach first (urgent), then the close
    await refused(b)
    await asyncio.wait_for(runner.closed.wait(), 10)
    await ended_in_store(gateway, created["session"]["id"])


async def test_a_1000_read_after_a_failed_send_detached_the_session_ends_it(
        app: tuple[Starlette, Gateway]) -> None:
    """The client hangs up mid-reply: the gateway's next send fails (the peer is
    closing) and detaches the session before the socket's reader has seen the
    close frame. The 1000 still ends the session (the soak's stale resume without
    any store stall)."""
    application, gateway = app
    s = await connect(application)
    created = await s.until("session.created")
    runner = gateway.runners[created["session"]["id"]]
    s.send({"type": "session.update", "session": {"instructions": "words=60"}})
    s.send({"type": "response.create"})
    await s.until("response.output_audio.delta")
    s.broken = True  # the next send fails
    for _ in range(1000):  # the failed send has no event of its own: a bounded poll
        if runner.outbox.attachment is None:
            break
        await asyncio.sleep(0.01)
    assert runner.outbox.attachment is None
    s.drop(1000)  # the close frame that made the send fail, read after it
    await asyncio.wait_for(s.task, 10)
    b = await resume(application, created)
    await refused(b)
    await ended_in_store(gateway, created["session"]["id"])
