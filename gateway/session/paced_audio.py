"""A session's reply audio on its way out: held until due, then handed on.

Stage outputs that are not transcripts wait here in order; ``run`` releases
each to the session's mailbox once ``duplex.pacing.Pacer`` says it is due, at
most ``lead_ms`` ahead of real time. A cancel calls ``drop_stale``, so nothing
of the old epoch still held here reaches the client after its
``response.done{cancelled}`` (I2). Bounded (I8): ``offer`` refuses beyond
``limit`` items.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from duplex.fence import Fence, is_current_epoch
from duplex.pacing import Pacer
from gateway.session import runner_items as ri
from gateway.session.wakeup import Wakeup
from plugins import base as pb


class PacedAudio:
    def __init__(self, lead_ms: float, limit: int, output_rate: int) -> None:
        self._items: deque[ri.Delta] = deque()
        self._ready = Wakeup()  # ``run`` is its one waiter
        self._pacer = Pacer(lead_ms)
        self._limit = limit
        self._rate = output_rate

    def offer(self, item: ri.Delta) -> bool:
        """Hold ``item`` until it is due; False (and not held) when full."""
        if len(self._items) >= self._limit:
            return False
        self._items.append(item)
        self._ready.set()
        return True

    def drop_stale(self, live: Fence) -> None:
        """Forget what belongs to an epoch before ``live``'s; pacing starts afresh."""
        self._items = deque(d for d in self._items if is_current_epoch(live, d.fence))
        self._pacer.reset()
        self._ready.set()  # wake ``run``: what it waits on may be gone

    async def run(self, release: Callable[[ri.Delta], None]) -> None:
        """Hand each item to ``release`` once due, in order, forever."""
        loop = asyncio.get_running_loop()
        while True:
            while not self._items:
                self._ready.clear()
                await self._ready.wait()
            item = self._items[0]
            delta = item.delta
            if isinstance(delta, pb.Speech):
                key = (item.fence.epoch, delta.turn_id)
                wait = self._pacer.due(key, loop.time()) - loop.time()
                if wait > 0:
                    # a timer, not wait_for (a task per paced chunk); whichever comes
                    # first, the due time or a new item, the loop looks again
                    self._ready.clear()
                    timer = loop.call_later(wait, self._ready.set)
                    try:
                        await self._ready.wait()
                    finally:
                        timer.cancel()
                    continue  # re-check: a cancel may have dropped it
                self._pacer.released(key, loop.time(), 1000.0 * len(delta.pcm) / self._rate)
            self._items.popleft()
            release(item)
