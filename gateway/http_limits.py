"""Limits in the HTTP layer that uvicorn does not enforce by itself (I8).

uvicorn waits for a request's headers forever: a client that opens connections
and then dribbles header bytes (slowloris) holds a file descriptor each, and
enough of them lock every other client out. ``HeaderDeadline`` gives each
request ``header_timeout_s`` from its first byte (from the connection's start
for the first one) to finish its headers, then closes the connection. A
WebSocket upgrade is a request too: once its headers are in, the deadline is
gone and the socket lives as long as its session wants.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


class HeaderDeadline(HttpToolsProtocol):
    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        log.warning("closed a connection from %s: no complete request headers within %.0f s",
                    _peer(self.client), self.header_timeout_s)
        self.transport.close()


def header_deadline(timeout_s: float) -> type[HeaderDeadline]:
    """The protocol class for uvicorn's ``http=`` with this deadline."""
    return type("HeaderDeadline", (HeaderDeadline,), {"header_timeout_s": timeout_s})


def _peer(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def raise_open_files_limit() -> tuple[int, int]:
    """Lift the soft limit on open files to the hard one (often 1,024 of 1,048,576):
    each session holds a socket, and running out stops every accept. Returns the
    (before, after) soft limits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
    return soft, max(soft, target)
