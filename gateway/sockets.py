"""Closing a server WebSocket so the peer always gets a close frame.

Two ways a connection used to end with no close frame (the client sees 1006):
a close reason the WebSocket library cannot send (over 123 bytes, or a lone
surrogate: it raises instead of closing), and an exception escaping an endpoint
(uvicorn then drops the TCP connection). ``close`` makes every reason valid;
``total`` turns whatever an endpoint lets out into a logged 1011 with a frame.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex.close_codes import CloseCode, close_reason
from gateway.log_limits import LogLimiter

log = logging.getLogger(__name__)
_crashes = LogLimiter(log)  # process-wide: one traceback per endpoint per window

Endpoint = Callable[[WebSocket], Awaitable[None]]


async def close(ws: WebSocket, code: int, reason: str = "") -> None:
    """Close ``ws`` with ``code`` and ``reason`` made valid; a socket that is
    already closed or gone is left as it is."""
    try:
        await ws.close(code, close_reason(reason))
    except (RuntimeError, WebSocketDisconnect, OSError):
        pass  # the peer is already gone, or we closed it before


def total(endpoint: Endpoint) -> Endpoint:
    """``endpoint``, except that an exception it lets out is logged (rate-limited)
    and the socket closed with 1011 and a close frame instead of dropped."""

    @functools.wraps(endpoint)
    async def guarded(ws: WebSocket) -> None:
        try:
            await endpoint(ws)
        except Exception:  # a bug of ours: this socket ends, the process goes on
            _crashes.warning(endpoint.__name__, "%s failed on %s", endpoint.__name__,
                             ws.url.path, exc_info=True)
            await close(ws, CloseCode.INTERNAL_ERROR, "internal error")

    return guarded
