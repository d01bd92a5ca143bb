"""The orchestrator and its in-process engine, with small real stage models."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from duplex.fence import Fence
from engines import build_engine
from engines.base import StageOutput, UnknownRequest
from engines.in_process import InProcessEngine
from engines.stages import InProcessStage, StageResult
from gateway.session_orchestrator import DuplexOrchestrator, request_id
from orchestrator.base import StagePool

SID = "sess_test"


class Accumulate:
    """Stage 0: remembers every unit; on "commit" emits the total so far."""

    def __init__(self) -> None:
        self.threads: set[str] = set()

    def open(self, fence: Fence) -> list[int]:
        return []

    def step(self, state: list[int], payload: Any) -> Iterator[StageResult]:
        self.threads.add(threading.current_thread().name)
        if payload == "commit":
            yield StageResult(sum(state), segment_finished=True, visible=False)
        elif payload == "boom":
            raise RuntimeError("model exploded")
        else:
            state.append(payload)

    def close(self, state: list[int]) -> None:
        pass


class Gated:
    """Stage 1: waits for a gate before producing each output (to race a cancel)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()

    def open(self, fence: Fence) -> None:
        return None

    def step(self, state: None, payload: Any) -> Iterator[StageResult]:
        self.started.set()
        for i in range(3):
            self.gate.wait(10)
            yield StageResult(("said", payload, i), segment_finished=True, visible=True)

    def close(self, state: None) -> None:
        pass


class Sink:
    """A session as the orchestrator sees it: a fence and an inbox."""

    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        self.outputs: asyncio.Queue[StageOutput] = asyncio.Queue()
        self.failures: asyncio.Queue[str] = asyncio.Queue()

    def current_fence(self) -> Fence:
        return self.fence

    def on_stage_output(self, out: StageOutput) -> None:
        self.outputs.put_nowait(out)

    def on_stage_failure(self, fence: Fence, message: str, stage: int) -> None:
        self.failures.put_nowait(message)


@pytest.fixture
async def setup() -> AsyncIterator[tuple[DuplexOrchestrator, Sink, Accumulate, Gated]]:
    listen, speak = Accumulate(), Gated()
    orch = DuplexOrchestrator([StagePool([InProcessEngine(0, "listen", listen)]),
                               StagePool([InProcessEngine(1, "speak", speak)])])
    sink = Sink(Fence(SID, 1, 0, 0))
    orch.attach(SID, sink)
    task = asyncio.create_task(orch.run())
    try:
        yield orch, sink, listen, speak
    finally:
        speak.gate.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_resumable_request_routes_to_next_stage_off_the_loop(setup: Any) -> None:
    orch, sink, listen, speak = setup
    fence = sink.fence
    await orch.submit(0, fence, 2)  # submit_initial
    await orch.submit(0, fence, 3)  # submit_update on the same resumable request
    await orch.submit(0, fence, "commit")
    speak.gate.set()
    outs = [await asyncio.wait_for(sink.outputs.get(), 5) for _ in range(3)]
    assert [o.result.payload for o in outs] == [("said", 5, 0), ("said", 5, 1), ("said", 5, 2)]
    assert all(o.request_id == request_id(fence, 1) for o in outs)
    assert listen.threads and not any(t == threading.main_thread().name for t in listen.threads)


async def test_i1_outputs_of_a_cancelled_epoch_never_reach_the_session(setup: Any) -> None:
    orch, sink, _, speak = setup
    old = sink.fence
    await orch.submit(0, old, 1)
    await orch.submit(0, old, "commit")
    assert await asyncio.to_thread(speak.started.wait, 5)  # stage 1 is generating
    assert orch.is_live(request_id(old, 1))
    sink.fence = Fence(SID, 1, 1, 0)  # a barge-in moved the session on
    await orch.abort_epoch(old)
    speak.gate.set()
    await orch.submit(0, sink.fence, 7)
    await orch.submit(0, sink.fence, "commit")
    out = await asyncio.wait_for(sink.outputs.get(), 5)
    assert out.tag.epoch == 1 and out.result.payload == ("said", 7, 0)
    assert not orch.is_live(request_id(old, 0)) and not orch.is_live(request_id(old, 1))


async def test_i1_stale_forward_is_refused(setup: Any) -> None:
    orch, sink, _, speak = setup
    speak.gate.set()
    old = sink.fence
    await orch.submit(0, old, 1)
    sink.fence = Fence(SID, 1, 1, 0)  # cancelled before stage 0 finished its segment
    await orch.submit(0, old, "commit")
    await orch.submit(0, sink.fence, "commit")  # the new epoch's work still flows
    assert (await asyncio.wait_for(sink.outputs.get(), 5)).tag.epoch == 1
    assert not orch.is_live(request_id(old, 1))


async def test_update_of_an_aborted_request_is_never_re_added(setup: Any) -> None:
    orch, sink, _, _ = setup
    rid = request_id(sink.fence, 0)
    await orch.submit(0, sink.fence, 1)
    await orch.abort([rid])
    with pytest.raises(UnknownRequest):
        await orch.submit_update(0, rid, 2)
    assert not orch.is_live(rid)


async def test_a_model_failure_becomes_a_session_failure(setup: Any) -> None:
    orch, sink, _, _ = setup
    await orch.submit(0, sink.fence, "boom")
    message = await asyncio.wait_for(sink.failures.get(), 5)
    assert "model exploded" in message
    assert not orch.is_live(request_id(sink.fence, 0))


class StuckFor:
    """Stage 1: never finishes a step of session ``stuck`` (until released)."""

    def __init__(self, stuck: str) -> None:
        self.stuck = stuck
        self.release = threading.Event()

    def open(self, fence: Fence) -> str:
        return fence.session_id

    def step(self, state: str, payload: Any) -> Iterator[StageResult]:
        if state == self.stuck:
            self.release.wait(30)
        yield StageResult(("said", payload), segment_finished=True, visible=True)

    def close(self, state: str) -> None:
        pass


async def test_a_stuck_session_does_not_stall_another_sessions_outputs() -> None:
    """One router serves every session's stage-0 outputs; forwarding into a request
    whose inputs are full fails that session instead of waiting on it."""
    stuck = StuckFor("sess_a")
    orch = DuplexOrchestrator([
        StagePool([InProcessEngine(0, "listen", Accumulate())]),
        # the bound as a plugin asks for it (the cascade's listener asks for more)
        StagePool([build_engine(1, InProcessStage("speak", stuck, threads=2,
                                                  max_pending_inputs=4))])])
    a, b = Sink(Fence("sess_a", 1, 0, 0)), Sink(Fence("sess_b", 1, 0, 0))
    orch.attach("sess_a", a)
    orch.attach("sess_b", b)
    task = asyncio.create_task(orch.run())
    try:
        for _ in range(10):  # more than session a's speaker can hold
            await orch.submit(0, a.fence, "commit")
        failure = await asyncio.wait_for(a.failures.get(), 5)
        assert "forward failed" in failure and "Backpressure" in failure
        await orch.submit(0, b.fence, 5)
        await orch.submit(0, b.fence, "commit")
        out = await asyncio.wait_for(b.outputs.get(), 5)
        assert out.result is not None and out.result.payload == ("said", 5)
    finally:
        stuck.release.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
