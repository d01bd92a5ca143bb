"""A session clock the test moves (``gateway.session.clock.Clock``).

Time stands still until ``advance``; the timers it passes then fire on the loop,
in the order of their deadlines (as the loop's own would), never inline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable


class ManualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, wall: float | None = None) -> None:
        self._now = 1000.0  # not 0: no code may take a time for "unset"
        self._wall_offset = (time.time() if wall is None else wall) - self._now
        self._timers: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall_offset + self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> ManualTimer:
        timer = ManualTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        if when <= self._now:
            self._fire()
        return timer

    @property
    def pending(self) -> list[float]:
        """The deadlines of the timers not yet fired nor cancelled, soonest first."""
        return sorted(t.when for _, _, t in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``; the timers now due fire (on the loop, soon)."""
        assert seconds >= 0
        self._now += seconds
        self._fire()

    def fire_early(self) -> None:
        """Fire every pending timer now, before its deadline, as a loop may run one
        a little early (asyncio's within its clock resolution, uvloop's to the ms)."""
        loop = asyncio.get_running_loop()
        while self._timers:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                loop.call_soon(timer.callback)

    def _fire(self) -> None:
        while self._timers and self._timers[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                asyncio.get_running_loop().call_soon(timer.callback)
