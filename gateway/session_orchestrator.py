"""``DuplexOrchestrator``: the session-aware orchestrator. It only fills seams.

It lives with the session runtime, not in ``orchestrator/``: it is where
sessions (fences, their errors) meet the generic ``orchestrator.base``, which
like the engines knows no sessions; the dependency points from here to there.

- request ids carry the fence: ``<sid>.i<incarnation>.e<epoch>.s<stage>``, so an
  epoch's requests (resumable, one per stage) are found and aborted together;
- forwarded requests are bound to their session's fence (``_on_stage_submitted``)
  and refused when the session moved on (R1);
- every stage output is fence-checked before anything else (I1); stale output
  is swallowed, visible output goes to the session's inbox;
- stage and forward failures become a session error, not a server crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from duplex.errors import CapacityError, FenceError
from duplex.fence import Fence, is_current_epoch
from engines.base import Backpressure, StageOutput, UnknownRequest
from orchestrator.base import Orchestrator, RequestState, StagePool

log = logging.getLogger(__name__)


class SessionSink(Protocol):
    """What a session runner offers the orchestrator."""

    def current_fence(self) -> Fence: ...

    def on_stage_output(self, out: StageOutput) -> None:
        """Enqueue (never handle inline) a visible, fence-checked output
        (``out.tag`` is its request's fence)."""
        ...

    def on_stage_failure(self, fence: Fence, message: str, stage: int) -> None:
        """``stage``'s request of ``fence``'s epoch failed and was aborted."""
        ...


def request_id(fence: Fence, stage: int) -> str:
    return f"{fence.session_id}.i{fence.incarnation}.e{fence.epoch}.s{stage}"


def session_of(request: str) -> str:
    """The session id a request id belongs to (session ids contain no dots)."""
    return request.partition(".")[0]


class DuplexOrchestrator(Orchestrator):
    def __init__(self, pools: list[StagePool],
                 observe_latency: Callable[[int, float, str], None] | None = None) -> None:
        super().__init__(pools, observe_latency)
        self.sessions: dict[str, SessionSink] = {}

    # -- sessions ----------------------------------------------------------------

    def attach(self, session_id: str, sink: SessionSink) -> None:
        self.sessions[session_id] = sink

    async def detach(self, fence: Fence) -> None:
        """Forget a session and abort all its requests (close/expiry cleanup)."""
        self.sessions.pop(fence.session_id, None)
        prefix = f"{fence.session_id}."
        await self.abort([rid for rid in self.requests if rid.startswith(prefix)])

    async def submit(self, stage: int, fence: Fence, payload: Any) -> None:
        """Feed the session's resumable request of ``fence``'s epoch at ``stage``:
        ``submit_initial`` for the epoch's first unit, ``submit_update`` after."""
        rid = request_id(fence, stage)
        if rid in self.requests:
            try:
                await self.submit_update(stage, rid, payload)
                return
            except UnknownRequest:
                await self.abort([rid])  # it failed meanwhile: start it afresh
            except Backpressure as exc:
                raise CapacityError(f"the model is behind this session's input: {exc}",
                                    code="input_backpressure") from exc
        await self.submit_initial(stage, rid, fence, payload)

    async def abort_epoch(self, fence: Fence) -> None:
        """Abort every stage request of ``fence``'s epoch (I2: after a cancel): one id
        per stage, named, not searched for among every session's requests (a barge-in
        a turn a session: a search would grow with the sessions of the process)."""
        await self.abort([request_id(fence, stage) for stage in range(len(self.pools))])

    # -- seams -------------------------------------------------------------------

    def _downstream_request_id(self, state: RequestState, stage: int) -> str:
        fence: Fence = state.binding
        return request_id(fence, stage)

    def _on_stage_submitted(self, child: RequestState, parent: RequestState) -> None:
        fence: Fence = parent.binding
        sink = self.sessions.get(fence.session_id)
        if sink is None or not is_current_epoch(sink.current_fence(), fence):
            raise FenceError(f"forward of {parent.request_id} is stale")
        child.binding = fence

    def _intercept_stage_output(self, out: StageOutput, state: RequestState) -> bool:
        fence: Fence = state.binding
        sink = self.sessions.get(fence.session_id)
        if sink is None or not is_current_epoch(sink.current_fence(), fence):
            return True  # session gone or epoch cancelled: swallow (I1)
        if out.result is not None and out.result.visible:
            sink.on_stage_output(out)
        return False

    async def _handle_forward_failure(self, out: StageOutput, exc: BaseException) -> None:
        state = self.requests.get(out.request_id)
        await self.abort([out.request_id])
        if isinstance(exc, FenceError) or state is None:
            return
        # the next stage could not take the input: its request is the one in doubt
        self._fail_session(state.binding, f"stage {out.stage} forward failed: {exc!r}",
                           out.stage + 1)

    async def _on_stage_error(self, out: StageOutput, state: RequestState) -> None:
        await self.abort([out.request_id])
        self._fail_session(state.binding, f"stage {out.stage} failed: {out.error}", out.stage)

    def _fail_session(self, fence: Fence, message: str, stage: int) -> None:
        sink = self.sessions.get(fence.session_id)
        if sink is not None and is_current_epoch(sink.current_fence(), fence):
            sink.on_stage_failure(fence, message, stage)
