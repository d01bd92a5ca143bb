"""Limits in the HTTP layer that uvicorn does not enforce by itself (I8).

uvicorn waits for a request's headers forever: a client that opens connections
and then dribbles header bytes (slowloris) holds a file descriptor each, and
enough of them lock every other client out. ``GuardedHttp`` is uvicorn's HTTP
protocol with three additions:

- a deadline: each request gets ``header_timeout_s`` from its first byte (from
  the connection's start for the first one) to finish its headers, then its
  connection is closed;
- admission (``gateway.admission``): a connection waiting for its headers is
  one the process may close, oldest first, to let a newcomer in when it runs
  short of file descriptors or has too many waiting from one address;
- probes first: ``/healthz`` and ``/readyz`` are answered past
  ``--max-connections`` (uvicorn's 503), so a full gateway is not taken for a
  dead one.

A WebSocket upgrade is a request too: once its headers are in, none of this
applies and the socket lives as long as its session wants; no frame of an open
WebSocket passes through here.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.admission import Admission
from gateway.log_limits import LogLimiter

log = logging.getLogger(__name__)
_warnings = LogLimiter(log)  # process-wide: a flood of slow clients is one line per window

PROBES = (b"/healthz", b"/readyz")


class GuardedHttp(HttpToolsProtocol):
    header_timeout_s = 10.0
    admission: Admission  # the process's, set by ``guarded_http``

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()
        self.admission.arrived(self, _host(self.client), len(self.connections))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a kept-alive connection's next request
            self._arm()
            self.admission.waiting(self, _host(self.client))

    def on_headers_complete(self) -> None:
        self._disarm()
        self.admission.admitted(self)
        # uvicorn answers 503 when len(connections) >= limit_concurrency: past the
        # budget, once admission had nothing left to shed; never to a probe
        probe = self.url.partition(b"?")[0] in PROBES
        self.limit_concurrency = None if probe else self.admission.refuse_from(
            len(self.connections))
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.admission.gone(self)
        super().connection_lost(exc)

    def shed(self) -> None:
        self._disarm()
        self.transport.close()

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        _warnings.warning("slow", "closed a connection from %s: no complete request headers "
                          "within %.0f s", _peer(self.client), self.header_timeout_s)
        self.transport.close()


def guarded_http(header_timeout_s: float, admission: Admission) -> type[GuardedHttp]:
    """The protocol class for uvicorn's ``http=``, with this deadline and admission."""
    return type("GuardedHttp", (GuardedHttp,),
                {"header_timeout_s": header_timeout_s, "admission": admission})


def _host(client: Any) -> str:
    return str(client[0]) if client else ""


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
