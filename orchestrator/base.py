"""The orchestrator: stage pools, per-request state, routing stage to stage.

It knows nothing about sessions. A stage output whose ``segment_finished`` is
set is forwarded to the next stage's request — ``submit_initial`` the first
time, ``submit_update`` after — unless a subclass intercepts it. Subclasses
fill the seams (``_intercept_stage_output``, ``_on_stage_submitted``,
``_handle_forward_failure``, ``_downstream_request_id``); the dependency only
ever points from the subclass to this base (the session-aware one is
``gateway.session_orchestrator``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engines.base import StageEngine, StageOutput, UnknownRequest

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestState:
    request_id: str
    stage: int
    binding: Any  # what the subclass ties the request to; opaque to the base
    submitted_at: float  # of the latest input; its first output measures stage latency
    awaiting_output: bool = True


class StagePool:
    """The replicas of one stage; a request stays on the replica it started on."""

    def __init__(self, replicas: Sequence[StageEngine]) -> None:
        if not replicas:
            raise ValueError("a stage needs at least one replica")
        self.replicas = list(replicas)
        self._placement: dict[str, StageEngine] = {}
        self._next = 0

    def place(self, request_id: str) -> StageEngine:
        engine = self._placement.get(request_id)
        if engine is None:
            engine = self.replicas[self._next % len(self.replicas)]
            self._next += 1
            self._placement[request_id] = engine
        return engine

    def engine_of(self, request_id: str) -> StageEngine | None:
        return self._placement.get(request_id)

    def forget(self, request_id: str) -> None:
        self._placement.pop(request_id, None)


class Orchestrator:
    def __init__(self, pools: Sequence[StagePool],
                 observe_latency: Callable[[int, float, str], None] | None = None) -> None:
        self.pools = list(pools)
        self.requests: dict[str, RequestState] = {}
        self._observe_latency = observe_latency

    async def run(self) -> None:
        """Serve every engine and route their outputs until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for pool in self.pools:
                for engine in pool.replicas:
                    tg.create_task(self._serve(engine), name=f"engine-{engine.name}")
                    tg.create_task(self._consume(engine), name=f"route-{engine.name}")

    async def _serve(self, engine: StageEngine) -> None:
        """An engine that fails stops alone; its ``readiness()`` says why."""
        try:
            await engine.run()
        except Exception:
            log.exception("stage engine %s stopped", engine.name)

    # -- requests ----------------------------------------------------------------

    async def submit_initial(self, stage: int, request_id: str, binding: Any,
                             payload: Any) -> None:
        """Start a request; ``binding`` is the subclass's, opaque here: the engine
        gets it as the request's tag."""
        engine = self.pools[stage].place(request_id)
        self.requests[request_id] = RequestState(request_id, stage, binding, time.monotonic())
        await engine.submit_initial(request_id, binding, payload)

    async def submit_update(self, stage: int, request_id: str, payload: Any) -> None:
        engine = self.pools[stage].engine_of(request_id)
        state = self.requests.get(request_id)
        if engine is None or state is None:
            raise UnknownRequest(request_id)
        state.submitted_at, state.awaiting_output = time.monotonic(), True
        await engine.submit_update(request_id, payload)

    def is_live(self, request_id: str) -> bool:
        return request_id in self.requests

    async def abort(self, request_ids: Sequence[str]) -> None:
        """Abort and forget requests; unknown ids are ignored (abort is idempotent)."""
        by_engine: dict[int, tuple[StageEngine, list[str]]] = {}
        for request_id in request_ids:
            state = self.requests.pop(request_id, None)
            if state is None:
                continue
            pool = self.pools[state.stage]
            engine = pool.engine_of(request_id)
            pool.forget(request_id)
            if engine is not None:
                by_engine.setdefault(id(engine), (engine, []))[1].append(request_id)
        for engine, ids in by_engine.values():
            await engine.abort(ids)

    # -- routing -----------------------------------------------------------------

    async def _consume(self, engine: StageEngine) -> None:
        async for out in engine.outputs():
            try:
                await self._route(out)
            except Exception as exc:
                log.exception("routing output of %s failed", out.request_id)
                await self._handle_forward_failure(out, exc)

    async def _route(self, out: StageOutput) -> None:
        state = self.requests.get(out.request_id)
        if state is None:
            return  # aborted or finished: late output is dropped, never re-added
        if out.error is not None:
            await self._on_stage_error(out, state)
            return
        if state.awaiting_output and self._observe_latency is not None:
            state.awaiting_output = False
            self._observe_latency(out.stage, time.monotonic() - state.submitted_at, out.request_id)
        if self._intercept_stage_output(out, state):
            return
        result = out.result
        if result is None or not result.segment_finished:
            return
        nxt = out.stage + 1
        if nxt >= len(self.pools):
            return
        child_id = self._downstream_request_id(state, nxt)
        if child_id in self.requests:
            await self.submit_update(nxt, child_id, result.payload)
            return
        child = RequestState(child_id, nxt, state.binding, time.monotonic())
        self._on_stage_submitted(child, state)
        await self.submit_initial(nxt, child_id, child.binding, result.payload)

    # -- seams -------------------------------------------------------------------

    def _intercept_stage_output(self, out: StageOutput, state: RequestState) -> bool:
        """True stops the output here: not forwarded and not emitted."""
        return False

    def _on_stage_submitted(self, child: RequestState, parent: RequestState) -> None:
        """A forwarded request is about to start; may rebind or refuse (raise)."""

    async def _handle_forward_failure(self, out: StageOutput, exc: BaseException) -> None:
        await self.abort([out.request_id])

    async def _on_stage_error(self, out: StageOutput, state: RequestState) -> None:
        """A stage reported a failed request."""
        await self.abort([out.request_id])

    def _downstream_request_id(self, state: RequestState, stage: int) -> str:
        return f"{state.request_id}>{stage}"
