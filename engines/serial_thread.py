"""``SerialThread``: the threads of an engine whose model blocks (``engines.llamacpp``).

One thread makes the model's server, then runs the calls posted to it one at
a time, in posting order, so what they touch needs no locks; a pool of
``workers`` threads runs the blocking calls (one completion each) beside it.
Calls posted before the server is made wait for it: the thread makes the
server before it reads its queue. A call that raises is logged and the next
one runs (the engine's handlers fail their request themselves).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_Call = tuple[Callable[..., Any], tuple[Any, ...]]


class SerialThread:
    """The serial thread and its worker pool (module docstring); ``label`` names
    them in logs (e.g. ``stage 1 (thinker)``)."""

    def __init__(self, label: str, make_server: Callable[[], Any], workers: int, *,
                 thread_name: str, worker_prefix: str) -> None:
        self._label = label
        self._thread_name = thread_name
        self._worker_prefix = worker_prefix
        self._make_server = make_server
        self._workers = workers
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.server: Any = None  # the serial thread's, once made
        self.init_seconds: float | None = None  # how long making the server took

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(self) -> None:
        """Start the thread; return once it has made the server (raise what
        stopped it)."""
        made: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._main, args=(made,),
                                        name=self._thread_name, daemon=True)
        self._thread.start()
        await asyncio.shield(asyncio.wrap_future(made))

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on the serial thread, after every call posted before."""
        self._queue.put((fn, args))

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on a worker (serial thread only: the pool is its)."""
        assert self._pool is not None
        self._pool.submit(fn, *args)

    async def stop(self, within_s: float) -> bool:
        """Run the calls posted so far, wait for the workers, free the server;
        False if the thread had not ended within ``within_s`` seconds."""
        thread = self._thread
        if thread is None:
            return True
        self._queue.put(None)
        await asyncio.to_thread(thread.join, within_s)
        return not thread.is_alive()

    def _main(self, made: concurrent.futures.Future[None]) -> None:
        try:
            t0 = time.monotonic()
            self.server = self._make_server()
            self.init_seconds = time.monotonic() - t0
        except BaseException as exc:
            made.set_exception(exc)
            return
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self._workers, thread_name_prefix=self._worker_prefix)
        made.set_result(None)
        while (item := self._queue.get()) is not None:
            fn, args = item
            try:
                fn(*args)
            except Exception:
                log.exception("%s: %s failed", self._label, fn.__name__)
        # each running completion stops at its next token; then the server's
        # destructor joins its own loop
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.server = None
