"""A wake-up for one waiting task: ``asyncio.Event`` without its per-wait cost.

A session's worker waits for its mailbox about 50 times a second, and its pacer
for each reply chunk. ``asyncio.Event.wait`` looks up the running loop on every
call (in CPython 3.11 that is a ``getpid()`` system call, for fork safety) and
keeps a deque of waiters; a profile at 32 sessions put 3-4 % of the gateway
there. One task waits on each of these, so one future, on a loop looked up once,
does the same.
"""

from __future__ import annotations

import asyncio


class Wakeup:
    """Set and clear as an ``asyncio.Event``; at most one task waits at a time."""

    __slots__ = ("_loop", "_set", "_waiter")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        """Return once set (at once if it is)."""
        if self._set:
            return
        if self._waiter is not None:
            raise RuntimeError("Wakeup has one waiter at a time")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
