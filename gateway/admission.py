"""Which connections a gateway process keeps when too many crowd its door (I8).

A connection costs a file descriptor from the moment it is accepted, before it
has said a word. A flood of connections that never finish their request headers
(slowloris) would hold every descriptor the process may open; the kernel's
accept then fails, and nobody gets in: not a load balancer's ``/readyz``, not a
caller, not the store's next connection.

``Admission`` keeps the connections still sending their request headers
("waiting"), oldest first, and when a new one arrives decides which to close:

- past ``per_address`` waiting from one peer address, that address's oldest;
- past the process's budget of connections, the oldest waiting one of all. The
  budget is the open-files limit less ``fd_reserve`` less the descriptors the
  process holds for everything else (the store, model files, relays, listening
  sockets: counted at most once a second), or ``max_connections`` if smaller.

The oldest, not the newest: a client that sends its headers at once leaves the
waiting list within a round trip, so it is never the oldest there, and gets in
for as long as a flood lasts; the flood's own connections are the ones that go.
A connection that finished its headers (a request being answered, a session's
WebSocket) is never closed here.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Protocol

from gateway.log_limits import LogLimiter

log = logging.getLogger(__name__)
_warnings = LogLimiter(log)  # process-wide: a flood is one line per window

RECOUNT_AFTER_S = 1.0  # how stale the count of other descriptors may be
NO_LIMIT = 1 << 62
BACKLOG = 2048  # uvicorn's own
OTHERS_ALLOWANCE = 512  # descriptors a process may hold besides connections (a guess)
MIN_BACKLOG = 8


class Waiting(Protocol):
    """A connection still sending its request headers."""

    def shed(self) -> None:
        """Close it now (its ``gone`` follows when its socket is closed)."""


def open_files_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return NO_LIMIT if soft == resource.RLIM_INFINITY else soft


def open_files() -> int:
    """Descriptors this process has open (0 where the system does not list them)."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(listing)) - 1  # less the listing's own
        except OSError:
            continue
    return 0  # pragma: no cover - every system the gateway runs on lists them


def backlog(fd_reserve: int, max_connections: int,
            limit: Callable[[], int] = open_files_limit) -> int:
    """uvicorn's ``backlog``: the kernel's queue of connections not accepted yet, and
    how many the event loop accepts in one go (asyncio; uvloop takes the whole
    queue). Both come before admission sees a connection, each holding a descriptor
    already, and a loop has a few such batches in flight. So where the open-files
    limit is what bounds connections, a quarter of the reserve: a burst then lands
    within it, and the kernel holds the rest of a flood (where it costs us nothing)
    rather than ``accept`` failing with EMFILE, which stops asyncio's loop accepting
    for a second and makes uvloop drop what is queued."""
    spare = limit() - fd_reserve - OTHERS_ALLOWANCE - BACKLOG
    if 0 < max_connections <= spare:
        return BACKLOG
    return max(MIN_BACKLOG, fd_reserve // 4)


class Admission:
    """The waiting connections of one process, and which of them a newcomer costs.
    ``open_files``, ``limit`` and ``clock`` are injectable (tests)."""

    def __init__(self, *, fd_reserve: int, per_address: int, max_connections: int,
                 on_shed: Callable[[str], None] = lambda reason: None,
                 open_files: Callable[[], int] = open_files,
                 limit: Callable[[], int] = open_files_limit,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fd_reserve = fd_reserve
        self.per_address = per_address
        self.max_connections = max_connections or NO_LIMIT
        self.on_shed = on_shed
        self._open_files = open_files
        self._limit = limit
        self._clock = clock
        self._waiting: dict[Waiting, str] = {}  # insertion order: oldest first
        self._by_address: dict[str, dict[Waiting, None]] = {}
        self._closing: set[Waiting] = set()  # shed, socket not closed yet
        self._others = 0  # descriptors held for anything but connections
        self._counted_at: float | None = None

    def arrived(self, conn: Waiting, address: str, connections: int) -> None:
        """``conn`` was accepted, from ``address``; ``connections``: those the
        process has open now, ``conn`` among them. Sheds what it costs."""
        self.waiting(conn, address)
        peers = self._by_address[address]
        if self.per_address and len(peers) > self.per_address:
            self._shed(next(iter(peers)), "address")
        over = connections - len(self._closing) - self.budget(connections)
        for _ in range(over):
            oldest = next(iter(self._waiting))
            if oldest is conn:
                break  # only finished connections are left to blame: keep the newcomer
            self._shed(oldest, "full")

    def waiting(self, conn: Waiting, address: str) -> None:
        """``conn`` waits for a request's headers (a kept-alive one: its next request)."""
        self._waiting[conn] = address
        self._by_address.setdefault(address, {})[conn] = None

    def admitted(self, conn: Waiting) -> None:
        """``conn`` sent its request's headers."""
        address = self._waiting.pop(conn, None)
        if address is not None:
            peers = self._by_address[address]
            del peers[conn]
            if not peers:
                del self._by_address[address]

    def gone(self, conn: Waiting) -> None:
        """``conn``'s socket is closed."""
        self.admitted(conn)
        self._closing.discard(conn)

    def budget(self, connections: int) -> int:
        """Connections the process may hold open now: its open-files limit less the
        reserve and what it holds for other things, or ``max_connections``."""
        now = self._clock()
        if self._counted_at is None or now - self._counted_at >= RECOUNT_AFTER_S:
            self._others = max(0, self._open_files() - connections)
            self._counted_at = now
        return min(self.max_connections, self._limit() - self.fd_reserve - self._others)

    def refuse_from(self, connections: int) -> int:
        """uvicorn's ``limit_concurrency`` for a request now: it refuses (503) once
        ``connections`` reach this, which counts the shed ones not closed yet."""
        return self.budget(connections) + len(self._closing) + 1

    def _shed(self, conn: Waiting, reason: str) -> None:
        address = self._waiting[conn]
        self.admitted(conn)
        self._closing.add(conn)
        self.on_shed(reason)
        if reason == "address":
            _warnings.warning(reason, "closed the oldest connection from %s still sending its "
                              "request headers: more than %d of them", address,
                              self.per_address)
        else:
            _warnings.warning(reason, "closed the oldest connection still sending its request "
                              "headers (from %s): the process holds all the connections it "
                              "may (--max-connections, or the open-files limit less "
                              "--fd-reserve)", address)
        conn.shed()

    def __len__(self) -> int:
        return len(self._waiting)
