"""A session's ordered mailbox with lanes: control before events before media (I7).

Within a lane order is first-in first-out. Each lane is bounded; a full lane
raises ``CapacityError`` to the producer instead of growing (I8).
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from typing import Any

from duplex.errors import CapacityError


class Lane(enum.IntEnum):
    CONTROL = 0  # client commands, failures, close
    EVENTS = 1  # unpaced stage output (transcripts)
    MEDIA = 2  # paced reply audio


class Mailbox:
    def __init__(self, limits: dict[Lane, int]) -> None:
        self._lanes: dict[Lane, deque[Any]] = {lane: deque() for lane in Lane}
        self._limits = limits
        self._ready = asyncio.Event()

    def put(self, lane: Lane, item: Any) -> None:
        queue = self._lanes[lane]
        if len(queue) >= self._limits[lane]:
            raise CapacityError(f"session {lane.name.lower()} queue is full",
                                code="input_backpressure" if lane is Lane.CONTROL
                                else "output_backpressure")
        queue.append(item)
        self._ready.set()

    def put_urgent(self, item: Any) -> None:
        """A control item that must never be refused (close, detach, attach)."""
        self._lanes[Lane.CONTROL].append(item)
        self._ready.set()

    def drain(self, lane: Lane) -> list[Any]:
        items = list(self._lanes[lane])
        self._lanes[lane].clear()
        return items

    async def get(self) -> Any:
        while True:
            for lane in Lane:
                if self._lanes[lane]:
                    return self._lanes[lane].popleft()
            self._ready.clear()
            await self._ready.wait()

    def purge(self, lane: Lane, keep: Any) -> int:
        """Drop the items of ``lane`` for which ``keep(item)`` is false."""
        queue = self._lanes[lane]
        before = len(queue)
        self._lanes[lane] = deque(item for item in queue if keep(item))
        return before - len(self._lanes[lane])

    def __len__(self) -> int:
        return sum(len(q) for q in self._lanes.values())
