"""``InProcessEngine(threads=0)``: a microsecond model run on the event loop keeps
the engine's contract (order, bounded undelivered outputs, abort, failures)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from engines import in_process
from engines.in_process import InProcessEngine
from plugins.base import StageResult


class Burst:
    """Yields ``payload`` results per step, noting where each step ran."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.closed = 0
        self.past_credit = asyncio.Event()  # it produced one output more than the credit

    def open(self, tag: Any) -> list[int]:
        return []

    def step(self, state: list[int], payload: Any) -> Iterator[StageResult]:
        self.threads.add(threading.current_thread().name)
        if payload == "boom":
            raise RuntimeError("model exploded")
        for i in range(payload):
            state.append(i)
            if len(state) > in_process.MAX_UNDELIVERED_OUTPUTS:
                self.past_credit.set()  # the engine gets it with no credit left
            yield StageResult(len(state), segment_finished=True, visible=True)

    def close(self, state: list[int]) -> None:
        self.closed += 1


@pytest.fixture
async def engine() -> AsyncIterator[tuple[InProcessEngine, Burst]]:
    model = Burst()
    eng = InProcessEngine(0, "burst", model, threads=0)
    task = asyncio.create_task(eng.run())
    try:
        yield eng, model
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def take(outputs: AsyncIterator[Any], n: int) -> list[Any]:
    return [await asyncio.wait_for(anext(outputs), 5) for _ in range(n)]


async def test_steps_run_on_the_loop_in_order(engine: Any) -> None:
    eng, model = engine
    await eng.submit_initial("r1", "tag", 2)
    await eng.submit_update("r1", 3)
    outs = await take(eng.outputs(), 5)
    assert [o.result.payload for o in outs] == [1, 2, 3, 4, 5]
    assert {o.request_id for o in outs} == {"r1"} and {o.tag for o in outs} == {"tag"}
    assert model.threads == {threading.main_thread().name}


async def test_out_of_credit_the_step_waits_for_the_consumer_and_loses_nothing(
        engine: Any) -> None:
    eng, model = engine
    limit = in_process.MAX_UNDELIVERED_OUTPUTS
    await eng.submit_initial("r1", None, limit + 40)
    await asyncio.wait_for(model.past_credit.wait(), 5)
    # the step parked with the output it could not queue: the loop runs on
    assert eng._outputs.qsize() == limit
    outs = await take(eng.outputs(), limit + 40)
    assert [o.result.payload for o in outs] == list(range(1, limit + 41))


async def test_an_abort_stops_a_step_waiting_for_credit(engine: Any) -> None:
    eng, model = engine
    limit = in_process.MAX_UNDELIVERED_OUTPUTS
    await eng.submit_initial("r1", None, limit + 40)
    await asyncio.wait_for(model.past_credit.wait(), 5)
    await eng.abort(["r1"])
    outs = await take(eng.outputs(), limit)
    assert [o.result.payload for o in outs] == list(range(1, limit + 1))
    await asyncio.sleep(0)
    assert eng._outputs.qsize() == 0 and not eng.has_request("r1")
    assert model.closed == 1


async def test_a_model_failure_ends_that_request_only(engine: Any) -> None:
    eng, _ = engine
    await eng.submit_initial("bad", None, "boom")
    await eng.submit_initial("good", None, 1)
    outs = await take(eng.outputs(), 2)
    failed = next(o for o in outs if o.request_id == "bad")
    assert failed.result is None and "model exploded" in failed.error
    assert next(o for o in outs if o.request_id == "good").result.payload == 1
    assert not eng.has_request("bad") and eng.has_request("good")
