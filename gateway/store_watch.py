"""How long the store has been unreachable: a blip is a ``/readyz`` matter, an
outage longer than ``--store-down-unhealthy-s`` makes ``/healthz`` fail, so that a
process supervisor (systemd, Kubernetes) restarts the gateway.

The watch pings the store on its own (every second, or each reaper interval if
that is shorter) from the gateway's start, before and apart from the plugin: a
slow model load is not an outage, and an outage is seen even when the
housekeeping never started. Any other call that reached the store may say so
with ``answered()``.

It also reads how full the store is (``INFO memory``): at ``FULL_AT`` of its
``maxmemory`` the gateway takes no new sessions and no new turns, so that the
turns in progress have the rest to finish in (docs/store.md). A store without
``maxmemory`` is never full here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from duplex.errors import DuplexError
from duplex.store.redis_store import RedisSessionStore

FULL_AT = 0.9  # of maxmemory: new work is refused past it


class StoreWatch:
    def __init__(self, store: RedisSessionStore, interval_s: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._interval_s = interval_s
        self._clock = clock
        self._started_at = clock()
        self._answered_at: float | None = None
        self._full = False

    def full(self) -> bool:
        """Whether the store was past ``FULL_AT`` of its maxmemory when last read."""
        return self._full

    def measured(self, used: int, limit: int) -> None:
        self._full = limit > 0 and used >= FULL_AT * limit

    def answered(self) -> None:
        self._answered_at = self._clock()

    def answered_within(self, seconds: float) -> bool:
        return self._answered_at is not None and self._clock() - self._answered_at < seconds

    def down_for(self) -> float:
        """Seconds since the store last answered (under a ping interval while it is up);
        a store that never answered is down since the start."""
        last = self._started_at if self._answered_at is None else self._answered_at
        return max(0.0, self._clock() - last)

    def unhealthy(self, bound_s: float) -> str:
        """Why ``/healthz`` fails (empty: it passes); a bound of 0 never fails it."""
        down = self.down_for()
        if bound_s <= 0 or down <= bound_s:
            return ""
        return f"store unreachable for {down:.1f} s (more than {bound_s:g} s)"

    async def run(self) -> None:
        while True:
            try:
                await self._store.ping()
                self.answered()
                self.measured(*await self._store.memory())
            except DuplexError:
                pass  # readiness reports the cause; this only keeps the time
            await asyncio.sleep(self._interval_s)
