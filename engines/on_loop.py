"""``LoopEngine``: a plugin's ``StageModel`` stepped on the event loop, inside the
submit that feeds it (``InProcessStage(threads=0)``).

For models whose every step takes microseconds and never blocks (the tone
plugin's). A thread hand-off per input costs more than such a step
(bench/README.md, "second pass"), and so does a task per request: a request's
task, its input queue and its events made about 30 objects, and an aborted
request's cancellation left them as cyclic garbage that only a full collection
frees, which then stalled every session of the process (bench/README.md,
"sixth pass"). Here a request is its model state and nothing else: a submit
steps its input at once and queues the outputs for the consumer.

- **Order.** A request's inputs are stepped in the order they are submitted,
  each to its end before the next.
- **Submitting never waits** (``engines.base.Backpressure``). At most
  ``MAX_UNDELIVERED_OUTPUTS`` outputs wait for the consumer; a step that meets
  that limit is held, with the output it could not queue, and the inputs that
  arrive meanwhile wait behind it (at most ``max_pending_inputs``, then
  ``Backpressure``). ``run`` resumes the held steps, oldest first, as the
  consumer makes room.
- **Failures.** A model that raises ends its own request: one output with the
  error, and the request is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.base import Backpressure, StageOutput, UnknownRequest
from engines.stages import StageModel, StageResult

log = logging.getLogger(__name__)

MAX_PENDING_INPUTS = 256  # per request, behind a held step; beyond: Backpressure
MAX_UNDELIVERED_OUTPUTS = 512  # per engine; beyond this a step is held


@dataclass(slots=True)
class _Request:
    request_id: str
    tag: Any
    state: Any
    live: bool = True
    # a step held for room: its generator and the output it could not queue yet
    held: tuple[Iterator[StageResult], StageResult] | None = None
    pending: deque[Any] = field(default_factory=deque)  # inputs not stepped yet (behind it)


class LoopEngine:
    """Runs one stage's ``StageModel`` on the event loop, in its submits."""

    def __init__(self, stage: int, name: str, model: StageModel, *,
                 max_pending_inputs: int = MAX_PENDING_INPUTS) -> None:
        self.stage = stage
        self.name = name
        self._model = model
        self._max_pending = max_pending_inputs
        self._requests: dict[str, _Request] = {}
        self._outputs: asyncio.Queue[StageOutput] = asyncio.Queue()
        self._held: deque[_Request] = deque()  # requests with a held step, oldest first
        self._room = asyncio.Event()  # the consumer took an output
        self._running = False

    async def run(self) -> None:
        """Resume held steps as the consumer makes room, until cancelled."""
        self._running = True
        try:
            while True:
                self._room.clear()
                await self._room.wait()
                while self._held and self._has_room():
                    self._drain(self._held.popleft())
        finally:
            for req in list(self._requests.values()):
                self._drop(req)

    def has_request(self, request_id: str) -> bool:
        return request_id in self._requests

    def readiness(self) -> str:
        return "" if self._running else f"stage {self.name} starting"

    async def submit_initial(self, request_id: str, tag: Any, payload: Any) -> None:
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already exists")
        try:
            state = self._model.open(tag)
        except Exception as exc:  # a model failure ends this request only
            self._fail(_Request(request_id, tag, None), exc)
            return
        req = _Request(request_id, tag, state)
        self._requests[request_id] = req
        req.pending.append(payload)
        self._drain(req)

    async def submit_update(self, request_id: str, payload: Any) -> None:
        req = self._requests.get(request_id)
        if req is None:
            raise UnknownRequest(request_id)
        if req.held is not None and len(req.pending) >= self._max_pending:
            raise Backpressure(f"stage {self.name}: {request_id} holds "
                               f"{self._max_pending} inputs")
        req.pending.append(payload)
        if req.held is None:
            self._drain(req)

    async def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            req = self._requests.get(request_id)
            if req is not None:
                self._drop(req)

    async def outputs(self) -> AsyncIterator[StageOutput]:
        while True:
            out = await self._outputs.get()
            if self._held:  # run() waits only while a step is held
                self._room.set()
            yield out

    # -- stepping ----------------------------------------------------------------

    def _has_room(self) -> bool:
        return self._outputs.qsize() < MAX_UNDELIVERED_OUTPUTS

    def _drain(self, req: _Request) -> None:
        """Step ``req``: its held step first, then its inputs in order, until none is
        left or a step is held for room (``run`` comes back to it then)."""
        while req.live and (req.held is not None or req.pending):
            result: StageResult | None
            try:
                if req.held is not None:
                    (steps, result), req.held = req.held, None
                else:
                    steps = iter(self._model.step(req.state, req.pending.popleft()))
                    result = next(steps, None)
                while result is not None:
                    if not self._has_room():
                        req.held = (steps, result)
                        self._held.append(req)
                        return
                    self._outputs.put_nowait(StageOutput(self.stage, req.request_id,
                                                         req.tag, result))
                    result = next(steps, None)
            except Exception as exc:  # a model failure ends this request only
                self._fail(req, exc)
                return

    def _drop(self, req: _Request) -> None:
        """Forget ``req`` and close its state (abort, failure, shutdown)."""
        if not req.live:
            return
        req.live = False
        self._requests.pop(req.request_id, None)
        if req.held is not None:
            steps, req.held = req.held[0], None
            close = getattr(steps, "close", None)  # a generator: its finally blocks run now
            if close is not None:
                close()
        req.pending.clear()
        if req.state is not None:
            state, req.state = req.state, None
            self._model.close(state)

    def _fail(self, req: _Request, exc: Exception) -> None:
        log.error("stage %s request %s failed", self.name, req.request_id,
                  exc_info=exc)
        self._drop(req)
        # past the limit if need be: a failure is never held behind the outputs
        self._outputs.put_nowait(StageOutput(self.stage, req.request_id, req.tag, None,
                                             repr(exc)))
