"""Stage engines: where model code runs, behind one small protocol.

A ``StageEngine`` takes resumable requests (``submit_initial`` once, then
``submit_update`` per unit), can abort them, and yields ``StageOutput``s as an
async stream. ``InProcessEngine`` runs a plugin's synchronous ``StageModel`` on
a worker thread pool — never on the event loop — one request's inputs strictly
in order, different requests concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from duplex.fence import Fence
from plugins.base import StageModel, StageResult

log = logging.getLogger(__name__)

MAX_PENDING_INPUTS = 256  # per request; beyond this the submitter waits
MAX_UNDELIVERED_OUTPUTS = 512  # per engine; beyond this the model thread waits


@dataclass(frozen=True, slots=True)
class StageOutput:
    stage: int
    request_id: str
    fence: Fence
    result: StageResult | None
    error: str | None = None


class UnknownRequest(KeyError):
    """An update for a request the engine does not hold (finished or aborted)."""


class StageEngine(Protocol):
    stage: int
    name: str

    async def run(self) -> None:
        """Serve until cancelled; the orchestrator runs this in its TaskGroup."""
        ...

    async def submit_initial(self, request_id: str, fence: Fence, payload: Any) -> None: ...

    async def submit_update(self, request_id: str, payload: Any) -> None:
        """Raises ``UnknownRequest`` for an id that is not live (never re-adds it)."""
        ...

    async def abort(self, request_ids: Sequence[str]) -> None: ...

    def has_request(self, request_id: str) -> bool: ...

    def readiness(self) -> str:
        """Empty once the engine can serve, else what it is still doing (or why not)."""
        ...

    def outputs(self) -> AsyncIterator[StageOutput]: ...


@dataclass(slots=True)
class _Request:
    request_id: str
    fence: Fence
    inputs: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue(MAX_PENDING_INPUTS))
    state: Any = None
    aborted: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task[None] | None = None


class InProcessEngine:
    """Runs one stage's ``StageModel`` on worker threads of this process."""

    def __init__(self, stage: int, name: str, model: StageModel, *, threads: int = 2) -> None:
        self.stage = stage
        self.name = name
        self._model = model
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

    async def submit_initial(self, request_id: str, fence: Fence, payload: Any) -> None:
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already exists")
        req = _Request(request_id, fence)
        self._requests[request_id] = req
        await req.inputs.put(payload)
        self._spawn.put_nowait(req)

    async def submit_update(self, request_id: str, payload: Any) -> None:
        req = self._requests.get(request_id)
        if req is None or req.aborted.is_set():
            raise UnknownRequest(request_id)
        await req.inputs.put(payload)

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
            req.state = await loop.run_in_executor(self._executor, self._model.open, req.fence)
            while not req.aborted.is_set():
                payload = await req.inputs.get()
                await loop.run_in_executor(self._executor, self._step, req, payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a model failure ends this request only
            log.exception("stage %s request %s failed", self.name, req.request_id)
            self._requests.pop(req.request_id, None)
            self._deliver(StageOutput(self.stage, req.request_id, req.fence, None, repr(exc)))
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
            out = StageOutput(self.stage, req.request_id, req.fence, result)
            self._loop.call_soon_threadsafe(self._outputs.put_nowait, out)

    def _deliver(self, out: StageOutput) -> None:
        self._credit.acquire(blocking=False)
        self._outputs.put_nowait(out)
