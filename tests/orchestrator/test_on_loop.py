"""``LoopEngine``: a microsecond model stepped on the event loop, in the submit
that feeds it, keeps the engine's contract (order, bounded undelivered outputs,
submits that never wait, abort, failures) with no task of its own per request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from engines import build_engine, on_loop
from engines.base import Backpressure
from engines.in_process import InProcessEngine
from engines.on_loop import LoopEngine
from engines.stages import InProcessStage, StageResult

LIMIT = on_loop.MAX_UNDELIVERED_OUTPUTS


class Burst:
    """Yields ``payload`` results per step (numbered per request), noting where
    each step ran and which steps were closed before their end."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.closed = 0
        self.cut_short = 0  # steps closed before their last output

    def open(self, tag: Any) -> list[int]:
        if tag == "unopenable":
            raise RuntimeError("cannot open")
        return []

    def step(self, state: list[int], payload: Any) -> Iterator[StageResult]:
        self.threads.add(threading.current_thread().name)
        if payload == "boom":
            raise RuntimeError("model exploded")
        done = False
        try:
            for _ in range(payload):
                state.append(len(state) + 1)
                yield StageResult(state[-1], segment_finished=True, visible=True)
            done = True
        finally:
            if not done:
                self.cut_short += 1

    def close(self, state: list[int]) -> None:
        self.closed += 1


@pytest.fixture
async def engine() -> AsyncIterator[tuple[LoopEngine, Burst]]:
    model = Burst()
    eng = LoopEngine(0, "burst", model, max_pending_inputs=3)
    task = asyncio.create_task(eng.run())
    await asyncio.sleep(0)
    try:
        yield eng, model
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def take(outputs: AsyncIterator[Any], n: int) -> list[Any]:
    return [await asyncio.wait_for(anext(outputs), 5) for _ in range(n)]


def test_a_stage_on_the_loop_gets_this_engine_and_a_threaded_one_keeps_its_threads() -> None:
    assert isinstance(build_engine(0, InProcessStage("x", Burst(), threads=0)), LoopEngine)
    assert isinstance(build_engine(0, InProcessStage("x", Burst(), threads=1)), InProcessEngine)
    with pytest.raises(ValueError, match="on_loop"):
        InProcessEngine(0, "x", Burst(), threads=0)


async def test_ready_once_running(engine: Any) -> None:
    eng, _ = engine
    assert eng.readiness() == ""
    assert LoopEngine(0, "idle", Burst()).readiness() == "stage idle starting"


async def test_steps_run_on_the_loop_in_the_submit_in_order(engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("r1", "tag", 2)
    assert eng._outputs.qsize() == 2  # stepped before the submit returned
    await eng.submit_update("r1", 3)
    outs = await take(eng.outputs(), 5)
    assert [o.result.payload for o in outs] == [1, 2, 3, 4, 5]
    assert {o.request_id for o in outs} == {"r1"} and {o.tag for o in outs} == {"tag"}
    assert model.threads == {threading.main_thread().name}


async def test_a_request_is_no_task(engine: Any) -> None:
    eng, _ = engine
    before = len(asyncio.all_tasks())
    for i in range(50):
        await eng.submit_initial(f"r{i}", None, 1)
    assert len(asyncio.all_tasks()) == before
    await eng.abort([f"r{i}" for i in range(50)])
    assert not any(eng.has_request(f"r{i}") for i in range(50))


async def test_out_of_room_a_step_is_held_the_submit_returns_and_nothing_is_lost(
        engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("r1", None, LIMIT + 40)  # returns: it never waits
    assert eng._outputs.qsize() == LIMIT
    await eng.submit_update("r1", 2)  # behind the held step
    outs = await take(eng.outputs(), LIMIT + 42)
    assert [o.result.payload for o in outs] == list(range(1, LIMIT + 43))
    assert model.cut_short == 0


async def test_inputs_behind_a_held_step_are_bounded(engine: Any) -> None:
    eng, _ = engine
    await eng.submit_initial("r1", None, LIMIT + 1)
    for _ in range(3):
        await eng.submit_update("r1", 1)
    with pytest.raises(Backpressure):
        await eng.submit_update("r1", 1)
    await eng.submit_initial("r2", None, 1)  # held too, and resumed in its turn
    outs = await take(eng.outputs(), LIMIT + 5)
    assert [o.result.payload for o in outs if o.request_id == "r1"] == list(range(1, LIMIT + 5))
    assert [o.result.payload for o in outs if o.request_id == "r2"] == [1]


async def test_an_abort_ends_a_held_step_and_closes_its_state(engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("r1", None, LIMIT + 40)
    await eng.abort(["r1"])
    assert model.cut_short == 1 and model.closed == 1 and not eng.has_request("r1")
    outs = await take(eng.outputs(), LIMIT)
    assert [o.result.payload for o in outs] == list(range(1, LIMIT + 1))
    await asyncio.sleep(0)
    assert eng._outputs.qsize() == 0
    await eng.abort(["r1"])  # idempotent
    assert model.closed == 1


async def test_a_model_failure_ends_that_request_only(engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("bad", None, "boom")
    await eng.submit_initial("good", None, 1)
    await eng.submit_initial("never", "unopenable", 1)
    outs = await take(eng.outputs(), 3)
    failed = next(o for o in outs if o.request_id == "bad")
    assert failed.result is None and "model exploded" in failed.error
    assert "cannot open" in next(o for o in outs if o.request_id == "never").error
    assert next(o for o in outs if o.request_id == "good").result.payload == 1
    assert not eng.has_request("bad") and eng.has_request("good")
    assert not eng.has_request("never")
    assert model.closed == 1  # bad's state; never's was never opened


async def test_stopping_closes_every_request(engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("r1", None, 1)
    await eng.submit_initial("r2", None, LIMIT)  # held
    task = next(t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "LoopEngine.run")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.closed == 2 and model.cut_short == 1
