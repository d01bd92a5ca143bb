"""``InProcessEngine``: a plugin's synchronous ``StageModel`` on a worker thread
pool of this process, one request's inputs strictly in order, different
requests concurrently.

A model whose every step takes microseconds and never blocks (the tone
plugin's) runs on the event loop instead (``engines.on_loop``): there a hand-off
to a thread and back costs more than the step itself. A model that blocks, or
computes for milliseconds, must keep a thread: on the loop it would stall every
session of the process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engines.base import Backpressure, StageOutput, UnknownRequest
from engines.stages import MAX_PENDING_INPUTS, StageModel

log = logging.getLogger(__name__)

MAX_UNDELIVERED_OUTPUTS = 512  # per engine; beyond this the model thread waits


@dataclass(slots=True)
class _Request:
    request_id: str
    tag: Any
    inputs: asyncio.Queue[Any]
    state: Any = None
    aborted: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task[None] | None = None


class InProcessEngine:
    """Runs one stage's ``StageModel`` on worker threads of this process."""

    def __init__(self, stage: int, name: str, model: StageModel, *, threads: int = 2,
                 max_pending_inputs: int = MAX_PENDING_INPUTS) -> None:
        if threads < 1:
            raise ValueError("an InProcessEngine needs a thread; engines.on_loop runs a "
                             "model on the event loop")
        self.stage = stage
        self.name = name
        self._model = model
        self._max_pending = max_pending_inputs
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=f"stage{stage}-{name}")
        self._requests: dict[str, _Request] = {}
        self._outputs: asyncio.Queue[StageOutput] = asyncio.Queue()
        self._credit = threading.Semaphore(MAX_UNDELIVERED_OUTPUTS)
        self._spawn: asyncio.Queue[_Request] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    req = await self._spawn.get()
                    if not req.aborted.is_set():
                        req.task = tg.create_task(self._serve(req), name=req.request_id)
        finally:
            for req in list(self._requests.values()):
                req.aborted.set()
            self._executor.shutdown(wait=False, cancel_futures=True)

    def has_request(self, request_id: str) -> bool:
        return request_id in self._requests

    def readiness(self) -> str:
        return "" if self._loop is not None else f"stage {self.name} starting"

    async def submit_initial(self, request_id: str, tag: Any, payload: Any) -> None:
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already exists")
        req = _Request(request_id, tag, asyncio.Queue(self._max_pending))
        self._requests[request_id] = req
        req.inputs.put_nowait(payload)
        self._spawn.put_nowait(req)

    async def submit_update(self, request_id: str, payload: Any) -> None:
        req = self._requests.get(request_id)
        if req is None or req.aborted.is_set():
            raise UnknownRequest(request_id)
        try:
            req.inputs.put_nowait(payload)
        except asyncio.QueueFull:
            raise Backpressure(f"stage {self.name}: {request_id} holds "
                               f"{self._max_pending} inputs") from None

    async def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            req = self._requests.pop(request_id, None)
            if req is None:
                continue
            req.aborted.set()
            if req.task is not None:
                req.task.cancel()

    async def outputs(self) -> AsyncIterator[StageOutput]:
        while True:
            out = await self._outputs.get()
            self._credit.release()
            yield out

    async def _serve(self, req: _Request) -> None:
        loop = asyncio.get_running_loop()
        try:
            req.state = await loop.run_in_executor(self._executor, self._model.open, req.tag)
            while not req.aborted.is_set():
                payload = await req.inputs.get()
                await loop.run_in_executor(self._executor, self._step, req, payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model failure ends this request only
            log.exception("stage %s request %s failed", self.name, req.request_id)
            self._requests.pop(req.request_id, None)
            self._deliver(StageOutput(self.stage, req.request_id, req.tag, None, repr(exc)))
        finally:
            if req.state is not None:
                state, req.state = req.state, None
                self._executor.submit(self._model.close, state)

    def _step(self, req: _Request, payload: Any) -> None:
        """Worker thread: run one input, pushing each output as it is produced."""
        for result in self._model.step(req.state, payload):
            if req.aborted.is_set():
                return
            while not self._credit.acquire(timeout=0.1):
                if req.aborted.is_set():
                    return
            assert self._loop is not None
            out = StageOutput(self.stage, req.request_id, req.tag, result)
            self._loop.call_soon_threadsafe(self._outputs.put_nowait, out)

    def _deliver(self, out: StageOutput) -> None:
        self._credit.acquire(blocking=False)
        self._outputs.put_nowait(out)
