"""A session's ordered mailbox with lanes (I7: control beats media).

Lanes are served in order: urgent before control before events before media.
Within a lane order is first-in first-out, with one exception: a command that
must not wait behind the user's audio (``response.cancel``, ``session.close``)
goes ahead of the audio appends queued at the end of the control lane, and no
further (it never overtakes a commit, a ``response.create`` or anything else
whose meaning depends on order). Every lane but the urgent one is bounded; a
full lane raises ``CapacityError`` to the producer instead of growing (I8). The
urgent lane carries only the runner's own items (attach, detach, close, lease
news), at most a few per attachment.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any

from duplex.errors import CapacityError
from gateway.session.wakeup import Wakeup


class Lane(enum.IntEnum):
    URGENT = 0  # attach, detach, close, token confirmations: never refused
    CONTROL = 1  # client commands, failures
    EVENTS = 2  # unpaced stage output (transcripts)
    MEDIA = 3  # paced reply audio


class Mailbox:
    def __init__(self, limits: dict[Lane, int]) -> None:
        self._lanes: dict[Lane, deque[Any]] = {lane: deque() for lane in Lane}
        # the lanes in serving order, for get() (50 calls a second a session: iterating
        # the enum costs more than the rest of it); purge keeps each deque, so this holds
        self._in_order = tuple(self._lanes[lane] for lane in sorted(Lane))
        self._limits = limits
        self._ready = Wakeup()  # the worker is its one waiter
        self._waiting = False  # the worker is in get(), waiting

    def put(self, lane: Lane, item: Any) -> None:
        self._check_room(lane)
        self._lanes[lane].append(item)
        self._ready.set()

    def put_ahead(self, lane: Lane, item: Any, *, of: Callable[[Any], bool],
                  refusable: bool = True) -> None:
        """Queue ``item`` ahead of the run of items at the lane's end for which
        ``of(item)`` holds (behind everything else); with ``refusable=False`` even
        into a full lane (an item that must not be lost, such as the client's close)."""
        if refusable:
            self._check_room(lane)
        queue = self._lanes[lane]
        at = len(queue)
        while at and of(queue[at - 1]):
            at -= 1
        queue.insert(at, item)
        self._ready.set()

    def put_urgent(self, item: Any) -> None:
        """An item that must never be refused or wait (close, detach, attach)."""
        self._lanes[Lane.URGENT].append(item)
        self._ready.set()

    def _check_room(self, lane: Lane) -> None:
        if len(self._lanes[lane]) >= self._limits[lane]:
            raise CapacityError(f"session {lane.name.lower()} queue is full",
                                code="input_backpressure" if lane is Lane.CONTROL
                                else "output_backpressure")

    def drain(self, lane: Lane) -> list[Any]:
        items = list(self._lanes[lane])
        self._lanes[lane].clear()
        return items

    async def get(self) -> Any:
        while True:
            for queue in self._in_order:
                if queue:
                    return queue.popleft()
            self._ready.clear()
            self._waiting = True
            try:
                await self._ready.wait()
            finally:
                self._waiting = False

    @property
    def idle(self) -> bool:
        """The worker waits for an item and none is queued: what it is given next it
        handles next."""
        return self._waiting and not any(self._in_order)

    def purge(self, lane: Lane, keep: Any) -> int:
        """Drop the items of ``lane`` for which ``keep(item)`` is false."""
        queue = self._lanes[lane]
        kept = [item for item in queue if keep(item)]
        dropped = len(queue) - len(kept)
        queue.clear()
        queue.extend(kept)
        return dropped

    def __len__(self) -> int:
        return sum(len(q) for q in self._lanes.values())
