"""The clock a session reads: its pacing, its timers, its lease renewals.

Everything in the session runtime that asks what time it is, or wants to be
woken at a time, asks a ``Clock``: the event loop's in the gateway
(``LoopClock``), one the test drives in the in-process tier, so a test moves
time on instead of sleeping through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds: the event loop's time (pacing, timers)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch, as the store keeps them (leases, a session's
        opening); moves with ``now``."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` (on the loop, never inline) once ``now()`` reaches ``when``."""
        ...


class LoopClock:
    """The running event loop's clock (looked up once: ``get_running_loop`` costs a
    system call a time in CPython 3.11)."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def now(self) -> float:
        loop = self._loop  # inline: read about twice an item
        if loop is None or loop.is_closed():
            loop = self._running()
        return loop.time()

    wall = staticmethod(time.time)  # no frame of ours: read on every append

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return self._running().call_at(when, callback)
