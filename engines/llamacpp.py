"""``LlamaCppEngine``: a ``StageEngine`` on an in-process llama.cpp server
(``xllamacpp``), serving ``ResumableAdapter`` requests like ``engines.vllm``.

Each stage request is one conversation: the engine keeps its context as text
(every chunk it sent, and every generated reply) and sends each new chunk as
one completion of *context + chunk*. llama.cpp's prompt cache holds the
context's tokens in the request's slot, so a chunk prefills only its own
tokens (``Usage.cached_tokens`` says how many were reused; ``prefills`` keeps
the latest figures for tests and benches).

The adapter contract, as on vLLM:

- chunks of a request run one at a time, in order; a generating chunk's text
  goes to ``on_text``; a context-only chunk (``generate=False``) is prefilled
  (its one sampled token dropped), so a turn's words can be cached while later
  ones are still to come;
- a generated reply stays in the context as generated, *without* its end of
  turn marker (as on vLLM, which drops a chunk's last sampled token): the
  adapter closes an open assistant turn itself;
- ``emit`` results go out when their chunk's turn comes;
- a context that would overflow the slot (counted from llama.cpp's usage,
  plus an estimate of the new chunk; or refused by the server) is restarted
  through the adapter's ``restart``.

Threads (``engines.serial_thread``): the llama.cpp server (its own loop
thread) is made on the engine's *serial* thread, which then runs every adapter
call and all per-request bookkeeping, one item at a time (so adapter state
needs no locks). Each completion blocks a worker of a pool of ``parallel``
threads; its per-token callback posts the text to the serial thread. Results cross to the caller's
loop with ``call_soon_threadsafe``. Abort marks the running completion, whose
next token callback stops it (llama.cpp then frees the slot); outputs of an
aborted request are dropped on the caller's loop at once.

A chunk's own ``sampling`` (``PromptChunk.sampling``, e.g. a tool call's
``grammar``) is merged over the stage's for its completion.

A ``detached`` chunk (an out-of-band reply) is a completion of its text alone,
in its turn, and the context stays as it was. llama.cpp gives it the slot
whose cache shares most of its prompt, often the request's own (their system
prompts match): a context it shares less than half of is kept in llama.cpp's
RAM cache and restored for the next chunk; of a shorter one the next chunk
prefills again what came after the shared prefix (docs/plugins.md has the
cost).

Guesses (``PromptChunk.speculative``): a request that is idle may run a guess
at its next chunk as a completion of *context + guess* whose text is held,
not given to ``on_text``, and which leaves the context as it was. The next
chunk adopts it when its text is the guess's (the held text is replayed
through ``on_text`` and the completion goes on; an adapter with
``on_guess_text``, ``engines.stages.GuessReader``, reads the held text as it
comes, to prepare what it can), or else stops it and waits
for its worker to let go of the slot, so the real chunk finds the guess's
prefill in the same slot's cache. A newer guess replaces an older one.

Backpressure: a request holding ``max_pending_inputs`` unhandled inputs makes
``submit_update`` raise ``Backpressure`` (engines.base).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.base import Backpressure, Prefill, UnknownRequest, Usage
from engines.llamacpp_server import (
    CompletionError,
    ContextOverflow,
    Delta,
    TokenEstimate,
    stream_completion,
)
from engines.resumable import Request, ResumableEngine
from engines.serial_thread import SerialThread
from engines.stages import GuessReader, PromptChunk, ResumableAdapter

log = logging.getLogger(__name__)

DEFAULT_SAMPLING: Mapping[str, Any] = {"temperature": 0.0}
MAX_PENDING_INPUTS = 256
PREFILLS_KEPT = 256


@dataclass(slots=True, eq=False)
class _Flight:
    """The chunk llama.cpp is working on; ``cancelled`` is read by its worker."""

    chunk: PromptChunk
    prompt: str
    inputs: int  # the request's inputs this chunk settles
    restarted: bool = False
    cancelled: bool = False
    text: list[str] = field(default_factory=list)
    finished: bool = False
    guess: bool = False  # speculative, not adopted (yet): its deltas are held
    held: list[Delta] = field(default_factory=list)
    running: bool = True  # its worker has not returned


@dataclass(slots=True, eq=False)
class _Session(Request):
    """One stage request; ``unhandled`` is touched on both sides (under the
    engine's lock)."""

    unhandled: int = 0
    pending: deque[tuple[PromptChunk, int]] = field(default_factory=deque)
    flight: _Flight | None = None
    next_guess: PromptChunk | None = None  # to start once the stopped guess lets go
    context: str = ""
    context_tokens: int = 0


class LlamaCppEngine(ResumableEngine[_Session]):
    """A ``StageEngine`` whose requests are conversations on one llama.cpp server.

    ``make_server`` (e.g. ``lambda: start_server(config)``) runs on the
    engine's serial thread inside ``run()``; ``n_ctx`` is one slot's context.
    """

    def __init__(self, stage: int, name: str, adapter: ResumableAdapter,
                 make_server: Callable[[], Any], *, n_ctx: int, parallel: int,
                 sampling: Mapping[str, Any] | None = None,
                 max_pending_inputs: int = MAX_PENDING_INPUTS,
                 shutdown_timeout: float = 60.0) -> None:
        super().__init__(stage, name, adapter)
        self._threads = SerialThread(f"stage {stage} ({name})", make_server, parallel,
                                     thread_name=f"stage{stage}-{name}-llamacpp",
                                     worker_prefix=f"stage{stage}-{name}-gen")
        self._limit = n_ctx
        self._sampling = dict(DEFAULT_SAMPLING if sampling is None else sampling)
        self._max_pending = max_pending_inputs
        self._shutdown_timeout = shutdown_timeout
        self._lock = threading.Lock()  # _Session.unhandled, the base's _stopping
        self._estimate = TokenEstimate()
        self.prefills: deque[Prefill] = deque(maxlen=PREFILLS_KEPT)
        self.guesses: Counter[str] = Counter()  # started/finished/adopted/dropped

    # -- StageEngine -----------------------------------------------------------------

    @property
    def init_seconds(self) -> float | None:
        """How long making the llama.cpp server took."""
        return self._threads.init_seconds

    async def _start_model(self) -> None:
        await self._threads.start()
        log.info("stage %s (%s): llama.cpp ready in %.1f s", self.stage, self.name,
                 self.init_seconds)

    def _starting(self) -> str:
        return "loading the model into llama.cpp" if self._threads.started else ""

    def _failure(self) -> str:
        return "" if self._threads.alive else "the llama.cpp thread died"

    def _new_request(self, request_id: str, tag: Any) -> _Session:
        return _Session(request_id, tag, unhandled=1)  # its first input, to be planned

    async def submit_update(self, request_id: str, payload: Any) -> None:
        session = self._requests.get(request_id)
        if session is None:
            raise UnknownRequest(request_id)
        with self._lock:
            if session.unhandled >= self._max_pending:
                raise Backpressure(f"stage {self.name}: {request_id} holds "
                                   f"{self._max_pending} inputs")
            session.unhandled += 1
        self._post(self._feed, session, payload)

    async def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            session = self._requests.pop(request_id, None)
            if session is not None:
                flight = session.flight
                if flight is not None:
                    flight.cancelled = True  # its worker stops at the next token
                self._post(self._close, session)

    # -- caller side -----------------------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the serial thread, in posting order (held until
        the server is up)."""
        with self._lock:
            if self._stopping:
                raise RuntimeError(f"stage {self.name} engine is stopped")
        self._threads.post(fn, *args)

    async def _stop(self) -> None:
        """Caller loop: forget every request, then shut the serial thread down."""
        sessions = list(self._requests.values())
        self._requests.clear()
        with self._lock:
            self._stopping = True
        if not self._threads.started:
            return
        for session in sessions:
            if session.flight is not None:
                session.flight.cancelled = True
            self._threads.post(self._close, session)
        if not await self._threads.stop(self._shutdown_timeout):
            log.warning("stage %s (%s): llama.cpp thread did not stop within %.0f s",
                        self.stage, self.name, self._shutdown_timeout)

    # -- serial thread: requests -------------------------------------------------------

    def _settle(self, session: _Session, inputs: int) -> None:
        with self._lock:
            session.unhandled -= inputs

    def _accept(self, session: _Session, chunk: PromptChunk | None) -> None:
        if chunk is None or chunk.speculative:
            self._settle(session, 1)
            if chunk is not None:
                self._guess(session, chunk)
            return
        session.next_guess = None  # a real chunk makes any waiting guess stale
        session.pending.append((chunk, 1))
        self._pump(session)

    def _pump(self, session: _Session) -> None:
        """Start the next chunk once the previous one has finished; a guess in
        flight is adopted by the next chunk or stopped first."""
        while not session.closed and session.pending:
            flight = session.flight
            if flight is not None and flight.guess:
                chunk, inputs = session.pending[0]
                if not flight.cancelled and _adopts(chunk, flight):
                    session.pending.popleft()
                    self._adopt(session, flight, chunk, inputs)
                    return  # the adopted completion's end pumps again
                self._drop(flight)
                if flight.running:
                    return  # its worker's end pumps again
                session.flight = None
            if session.flight is not None:
                return
            chunk, inputs = session.pending.popleft()
            for result in chunk.emit:
                self._emit(session, result)
            try:
                self._send(session, chunk, inputs)
            except Exception as exc:
                self._fail(session, exc)
        if not session.closed and session.flight is None and session.next_guess is not None:
            guess, session.next_guess = session.next_guess, None
            self._guess(session, guess)

    # -- serial thread: guesses ------------------------------------------------------

    def _guess(self, session: _Session, chunk: PromptChunk) -> None:
        """Run a guess ahead if the request is idle (or only guessing)."""
        flight = session.flight
        if not chunk.generate:  # withdrawn: stop the guess, start no waiting one
            session.next_guess = None
            if flight is not None and flight.guess:
                self._drop(flight)
            return
        if session.closed or session.pending or chunk.token_ids:
            return
        if flight is not None:
            if not flight.guess:
                if not flight.chunk.generate:  # context being prefilled: guess after it
                    session.next_guess = chunk
                return  # a reply being generated: no guessing
            if not flight.cancelled and flight.chunk.text == chunk.text:
                return  # the same guess again
            self._drop(flight)
            if flight.running:
                session.next_guess = chunk
                return
            session.flight = None
        max_tokens = max(1, chunk.max_tokens)
        if session.context_tokens + self._estimate(chunk.text) + max_tokens > self._limit:
            return  # would need a restart: not worth a guess
        self.guesses["started"] += 1
        self._start(session, _Flight(chunk, session.context + chunk.text, 0, guess=True))

    def _drop(self, flight: _Flight) -> None:
        if not flight.cancelled:
            flight.cancelled = True
            self.guesses["dropped"] += 1

    def _adopt(self, session: _Session, flight: _Flight, chunk: PromptChunk,
               inputs: int) -> None:
        """The guess was right: it becomes ``chunk``'s completion."""
        self.guesses["adopted"] += 1
        for result in chunk.emit:
            self._emit(session, result)
        flight.chunk, flight.inputs, flight.guess = chunk, inputs, False
        held, flight.held = flight.held, []
        for delta in held:
            if session.flight is not flight:
                return  # on_text failed the request
            self._take(session, flight, delta)

    def _send(self, session: _Session, chunk: PromptChunk, inputs: int) -> None:
        if chunk.token_ids is not None:
            raise ValueError("the llama.cpp engine takes text chunks, not token ids")
        if not chunk.text:
            if chunk.generate:
                raise ValueError("a generating chunk needs a prompt")
            self._settle(session, inputs)
            return
        max_tokens = max(1, chunk.max_tokens) if chunk.generate else 0
        if chunk.detached:  # its own prompt, beside the context
            if self._estimate(chunk.text) + max_tokens > self._limit:
                raise RuntimeError(f"a detached prompt of ~{self._estimate(chunk.text)} "
                                   f"tokens does not fit {self._limit}")
            # (as restarted: a prompt the server finds too long fails, as it must)
            self._start(session, _Flight(chunk, chunk.text, inputs, restarted=True))
            return
        restarted = False
        if session.context_tokens + self._estimate(chunk.text) + max_tokens > self._limit:
            chunk = self._restart(session, chunk, max_tokens)
            restarted = True
        self._start(session, _Flight(chunk, session.context + chunk.text, inputs, restarted))

    def _restart(self, session: _Session, chunk: PromptChunk, max_tokens: int) -> PromptChunk:
        """The context is full: the adapter's compacted conversation replaces it."""
        budget = self._limit - max_tokens
        log.info("stage %s (%s) request %s: context full (%d tokens); restarting it",
                 self.stage, self.name, session.request_id, session.context_tokens)
        fresh = self._adapter.restart(session.state, chunk, budget, self._estimate)
        if fresh is None:
            raise RuntimeError(f"context full ({session.context_tokens} tokens)")
        if not fresh.text or self._estimate(fresh.text) > budget:
            raise RuntimeError(f"restarted prompt of ~{self._estimate(fresh.text)} tokens "
                               f"does not fit {budget}")
        session.context, session.context_tokens = "", 0
        return fresh

    def _start(self, session: _Session, flight: _Flight) -> None:
        session.flight = flight
        self._threads.submit(self._complete, session, flight)

    # -- worker threads: one completion each -------------------------------------------

    def _complete(self, session: _Session, flight: _Flight) -> None:
        chunk = flight.chunk
        max_tokens = max(1, chunk.max_tokens) if chunk.generate else 0
        sampling = DEFAULT_SAMPLING
        if chunk.generate:  # the chunk's own options (a tool call's grammar) win
            sampling = {**self._sampling, **chunk.sampling} if chunk.sampling else self._sampling

        def on_delta(delta: Delta) -> bool:
            if flight.cancelled:
                return True
            if delta.text or delta.finish:
                self._threads.post(self._on_delta, session, flight, delta)
            return False

        try:
            if not flight.cancelled:
                stream_completion(self._threads.server, flight.prompt, max_tokens, sampling,
                                  on_delta)
        except BaseException as exc:
            self._threads.post(self._on_failed, session, flight, exc)
            return
        self._threads.post(self._on_end, session, flight)

    # -- serial thread: completion results ----------------------------------------------

    def _current(self, session: _Session, flight: _Flight) -> bool:
        return not session.closed and session.flight is flight and not flight.cancelled

    def _on_delta(self, session: _Session, flight: _Flight, delta: Delta) -> None:
        if not self._current(session, flight):
            return
        if flight.guess:
            flight.held.append(delta)
            if delta.finish is not None:
                flight.finished = True
                self.guesses["finished"] += 1
            if isinstance(self._adapter, GuessReader):
                self._read_guess(session, flight, delta)
            return
        self._take(session, flight, delta)

    def _read_guess(self, session: _Session, flight: _Flight, delta: Delta) -> None:
        assert isinstance(self._adapter, GuessReader)
        try:
            results = self._adapter.on_guess_text(session.state, flight.chunk, delta.text,
                                                  delta.finish is not None)
        except Exception as exc:
            self._fail(session, exc)
            return
        for result in results:
            self._emit(session, result)

    def _take(self, session: _Session, flight: _Flight, delta: Delta) -> None:
        finished = delta.finish is not None
        flight.text.append(delta.text)
        chunk = flight.chunk
        if chunk.generate:
            try:
                results = self._adapter.on_text(session.state, chunk, delta.text, finished)
            except Exception as exc:
                self._fail(session, exc)
                return
        if finished and delta.usage is not None:  # on record before the last output goes
            self.prefills.append(Prefill(session.request_id, delta.usage, chunk.generate,
                                         chunk.detached))
        if chunk.generate:
            for result in results:
                self._emit(session, result)
        if finished:
            flight.finished = True
            self._finish(session, flight, delta.usage)

    def _finish(self, session: _Session, flight: _Flight, usage: Usage | None) -> None:
        if not flight.chunk.detached:  # a detached chunk leaves the context as it was
            self._extend(session, flight, usage)
        session.flight = None
        self._settle(session, flight.inputs)
        self._pump(session)

    def _extend(self, session: _Session, flight: _Flight, usage: Usage | None) -> None:
        generated = "".join(flight.text) if flight.chunk.generate else ""
        session.context = flight.prompt + generated
        if usage is not None:
            self._estimate.learn(flight.prompt, usage.prompt_tokens)
            session.context_tokens = usage.prompt_tokens + (
                usage.completion_tokens if flight.chunk.generate else 0)
        else:
            session.context_tokens = self._estimate(session.context)

    def _on_end(self, session: _Session, flight: _Flight) -> None:
        flight.running = False
        if flight.guess:
            self._guess_ended(session, flight)
        elif self._current(session, flight) and not flight.finished:
            self._fail(session, "llama.cpp ended the completion without finishing it")

    def _guess_ended(self, session: _Session, flight: _Flight) -> None:
        """A guess's worker let go of the slot: keep a finished guess for its
        chunk; forget a stopped or failed one and go on."""
        if session.closed or session.flight is not flight:
            return
        if flight.cancelled or not flight.finished:
            session.flight = None
            self._pump(session)

    def _on_failed(self, session: _Session, flight: _Flight, exc: BaseException) -> None:
        if flight.guess:
            flight.running, flight.finished = False, False
            self._guess_ended(session, flight)
            return
        if not self._current(session, flight):
            return
        if isinstance(exc, ContextOverflow) and not flight.restarted:
            # our estimate was short: the server counted the prompt exactly
            session.context_tokens = exc.prompt_tokens
            session.flight = None
            try:
                max_tokens = max(1, flight.chunk.max_tokens) if flight.chunk.generate else 0
                chunk = self._restart(session, flight.chunk, max_tokens)
            except Exception as err:
                self._fail(session, err)
                return
            self._start(session, _Flight(chunk, chunk.text, flight.inputs, restarted=True))
            return
        reason = exc if isinstance(exc, CompletionError) else repr(exc)
        self._fail(session, str(reason))

    def _close(self, session: _Session) -> None:
        """Serial thread: end a request — stop its completion, close the adapter."""
        if session.closed:
            return
        session.closed = True
        session.pending.clear()
        if session.flight is not None:
            session.flight.cancelled = True
            session.flight = None
        if session.opened:
            try:
                self._adapter.close(session.state)
            except Exception:
                log.exception("stage %s (%s): adapter close failed", self.stage, self.name)


def _adopts(chunk: PromptChunk, guess: _Flight) -> bool:
    """``chunk`` is what ``guess`` guessed: it generates from the same text
    under the same options (a guess made without a turn's grammar is not that
    turn's reply)."""
    return (chunk.generate and chunk.token_ids is None and not chunk.speculative
            and not chunk.detached
            and chunk.text == guess.chunk.text and chunk.max_tokens == guess.chunk.max_tokens
            and (chunk.sampling or None) == (guess.chunk.sampling or None))
