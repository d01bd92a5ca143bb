"""What the resumable-LLM engine tests share (vLLM and llama.cpp): an output router
that sorts an engine's one output stream by request, and the text of a reply."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

from engines.base import StageEngine, StageOutput
from plugins.base import ReplyStep
from plugins.cascade.payloads import Clause


class Router:
    """Reads an engine's single output stream and sorts it by request id.
    ``forwarded_only``: every clause must be a finished, invisible segment."""

    forwarded_only = False

    def __init__(self, engine: StageEngine) -> None:
        self.engine = engine
        self.queues: dict[str, asyncio.Queue[StageOutput]] = defaultdict(asyncio.Queue)
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _pump(self) -> None:
        async for out in self.engine.outputs():
            if out.result is not None and isinstance(out.result.payload, ReplyStep):
                continue  # a note for the session's timings, never for the talker
            self.arrivals[out.request_id].append(time.perf_counter())
            self.queues[out.request_id].put_nowait(out)

    async def next(self, request_id: str, timeout: float = 120.0) -> StageOutput:
        return await asyncio.wait_for(self.queues[request_id].get(), timeout)

    def pending(self, request_id: str) -> int:
        return self.queues[request_id].qsize()

    async def reply(self, request_id: str, timeout: float = 180.0) -> list[Clause]:
        """Clauses up to and including the one marked ``last``."""
        clauses: list[Clause] = []
        deadline = time.monotonic() + timeout
        while True:
            out = await self.next(request_id, max(0.1, deadline - time.monotonic()))
            assert out.error is None, out.error
            assert out.result is not None
            clause = out.result.payload
            assert isinstance(clause, Clause), clause
            if self.forwarded_only:
                assert out.result.segment_finished and not out.result.visible
            clauses.append(clause)
            if clause.last:
                return clauses


def reply_text(clauses: list[Clause]) -> str:
    return "".join(c.text for c in clauses)


@contextlib.asynccontextmanager
async def running(engine: Any, router: type[Router] = Router) -> AsyncIterator[Router]:
    """``engine.run()`` as a task (ready on entry), its outputs routed by a
    ``router``; on exit the run is cancelled (which shuts the model down)."""
    task = asyncio.create_task(engine.run())
    routed = router(engine)
    routed.start()
    try:
        ready = asyncio.create_task(engine.wait_ready())
        await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raise why it stopped
        await ready
        yield routed
    finally:
        await routed.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
