"""What the resumable LLM engines (``engines.llamacpp``, ``engines.vllm``) share:
the requests as the caller's loop sees them.

Each engine runs its model on threads of its own and calls the plugin's
``ResumableAdapter`` on one engine thread only; this base holds the caller's
side: the request table (a new request is posted to the engine thread to
open), the output queue, readiness, and the crossing of results back onto the
caller's loop (``call_soon_threadsafe``), where an output of a request aborted
meanwhile is dropped. Subclasses say how work is posted to their thread
(``_post``), how they start and stop, what they keep of a request
(``_new_request``), what a planned chunk does (``_accept``) and closing
(``_close``) mean, and, for readiness, what starting is doing (``_starting``)
and whether the model still runs (``_failure``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from engines.base import StageOutput
from engines.stages import PromptChunk, ResumableAdapter, StageResult

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Request:
    """One stage request. ``request_id``/``tag`` are read on both sides; the rest
    on the engine thread only (subclasses say otherwise where they do)."""

    request_id: str
    tag: Any
    state: Any = None  # the adapter's, from ``open``
    opened: bool = False
    closed: bool = False


R = TypeVar("R", bound=Request)


class ResumableEngine(Generic[R]):
    """The caller's side of a resumable LLM engine (see the module docstring)."""

    def __init__(self, stage: int, name: str, adapter: ResumableAdapter) -> None:
        self.stage = stage
        self.name = name
        self._adapter = adapter
        self._requests: dict[str, R] = {}
        self._outputs: asyncio.Queue[StageOutput] = asyncio.Queue()
        self._caller_loop: asyncio.AbstractEventLoop | None = None
        self._ready = asyncio.Event()  # caller side: the model is up (or failed)
        self._start_error: BaseException | None = None
        self._stopping = False  # set once by ``_stop``, under the subclass's lock

    # -- to be provided ---------------------------------------------------------------

    async def _start_model(self) -> None:
        """Bring the model up off the caller's loop; raise what stops it."""
        raise NotImplementedError

    async def _stop(self) -> None:
        """Forget every request and shut the model down."""
        raise NotImplementedError

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the engine thread, in posting order."""
        raise NotImplementedError

    def _new_request(self, request_id: str, tag: Any) -> R:
        """The engine's record of a new request."""
        raise NotImplementedError

    def _accept(self, request: R, chunk: PromptChunk | None) -> None:
        """What the engine does with a payload's planned chunk."""
        raise NotImplementedError

    def _close(self, request: R) -> None:
        raise NotImplementedError

    def _starting(self) -> str:
        """What bringing the model up is doing; empty before ``run`` began it."""
        raise NotImplementedError

    def _failure(self) -> str:
        """Why the started model can no longer serve (it died); empty while it can."""
        raise NotImplementedError

    # -- StageEngine ------------------------------------------------------------------

    async def run(self) -> None:
        """Start the model, then serve until cancelled; on cancellation stop."""
        self._bind_caller()
        try:
            try:
                await self._start_model()
            except Exception as exc:
                self._start_error = exc
                self._ready.set()
                for request in list(self._requests.values()):
                    self._deliver(request, None, f"engine failed to start: {exc!r}")
                raise
            self._ready.set()
            await asyncio.Event().wait()
        finally:
            await self._stop()

    async def submit_initial(self, request_id: str, tag: Any, payload: Any) -> None:
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already exists")
        self._bind_caller()
        request = self._new_request(request_id, tag)
        self._requests[request_id] = request
        self._post(self._open, request, payload)

    def readiness(self) -> str:
        """Empty once the engine can serve, else what it is doing or why not."""
        if self._start_error is not None:
            return f"stage {self.name} failed to start: {self._start_error}"
        if self._stopping:
            return f"stage {self.name} stopped"
        if not self._ready.is_set():
            return f"stage {self.name}: {self._starting() or 'not started'}"
        failure = self._failure()
        return f"stage {self.name}: {failure}" if failure else ""

    async def wait_ready(self) -> None:
        """Return once the model is up; raise what stopped it from starting.
        (Submitting earlier is fine: requests wait for it.)"""
        await self._ready.wait()
        if self._start_error is not None:
            raise RuntimeError(f"{self.name} engine failed to start") from self._start_error

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._start_error is None

    def has_request(self, request_id: str) -> bool:
        return request_id in self._requests

    async def outputs(self) -> AsyncIterator[StageOutput]:
        while True:
            yield await self._outputs.get()

    # -- caller side ------------------------------------------------------------------

    def _bind_caller(self) -> None:
        if self._caller_loop is None:
            self._caller_loop = asyncio.get_running_loop()

    def _deliver(self, request: R, result: StageResult | None, error: str | None) -> None:
        """Caller loop: queue an output unless its request was aborted meanwhile."""
        if self._requests.get(request.request_id) is not request:
            return
        if error is not None:
            del self._requests[request.request_id]
        self._outputs.put_nowait(StageOutput(self.stage, request.request_id, request.tag,
                                             result, error))

    # -- engine thread ----------------------------------------------------------------

    def _emit(self, request: R, result: StageResult | None = None,
              error: str | None = None) -> None:
        loop = self._caller_loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._deliver, request, result, error)
        except RuntimeError:  # the caller's loop is closed: nobody to tell
            pass

    def _fail(self, request: R, exc: BaseException | str) -> None:
        if request.closed:
            return
        if isinstance(exc, BaseException):
            log.error("stage %s (%s) request %s failed", self.stage, self.name,
                      request.request_id, exc_info=exc)
        else:
            log.error("stage %s (%s) request %s failed: %s", self.stage, self.name,
                      request.request_id, exc)
        self._emit(request, error=repr(exc) if isinstance(exc, BaseException) else exc)
        self._close(request)

    def _open(self, request: R, payload: Any) -> None:
        if request.closed:
            return
        try:
            request.state = self._adapter.open(request.tag)
        except Exception as exc:
            self._fail(request, exc)
            return
        request.opened = True
        self._feed(request, payload)

    def _feed(self, request: R, payload: Any) -> None:
        """Engine thread: plan a payload's chunk (a planning failure fails the
        request) and hand it to the engine."""
        if request.closed:
            return
        try:
            chunk = self._adapter.plan(request.state, payload)
        except Exception as exc:
            self._fail(request, exc)
            return
        self._accept(request, chunk)
