"""The in-process test tier: the real app (routes, realtime and Twilio adapters,
session runners, orchestrator, tone plugin) on a real Valkey, driven over
in-memory ASGI sockets instead of uvicorn and TCP.

Why: with no network and no second process between the test and the gateway,
what the test sends is in the session's inbox before the session's worker
runs again, so orderings that are races over a real socket can be set up
exactly. The reaper's clock is the test's: housekeeping runs only at start
(``reaper_interval_s`` is an hour) and tests call ``Gateway._reap(now)``; so
can the sessions' be (``running_app(clock=ManualClock())``: pacing, the idle
and lifetime timers and lease renewals then move only when the test says).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.gateway import Gateway
from gateway.session.clock import Clock


class Closed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"closed {code} {reason!r}")
        self.code = code
        self.reason = reason


class MemorySocket:
    """An ASGI WebSocket client: one endpoint call of the app, in this loop."""

    def __init__(self, app: Starlette, path: str, query: str = "",
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        self._to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws",
                 "http_version": "1.1", "path": path, "raw_path": path.encode(),
                 "query_string": query.encode(), "root_path": "",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
                 "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
                 "subprotocols": [], "state": {}}
        self.task = asyncio.create_task(app(scope, self._to_app.get, self._send))
        self.events: list[dict[str, Any]] = []
        self.closed: Closed | None = None
        self.broken = False  # sends fail, as on a socket the peer left

    async def _send(self, message: dict[str, Any]) -> None:
        if self.broken and message["type"] == "websocket.send":
            raise OSError("the peer went away")
        await self._from_app.put(message)

    async def open(self) -> None:
        await self._to_app.put({"type": "websocket.connect"})
        accepted = await asyncio.wait_for(self._from_app.get(), 10)
        assert accepted["type"] == "websocket.accept", accepted

    def send(self, obj: dict[str, Any]) -> None:
        """Queue a text frame (the app reads it when it next receives)."""
        self._to_app.put_nowait({"type": "websocket.receive", "text": json.dumps(obj)})

    def drop(self, code: int = 1006) -> None:
        self._to_app.put_nowait({"type": "websocket.disconnect", "code": code})

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        # a new exception each time: one kept on the socket would hold, through
        # its traceback, this frame and so the socket (a cycle test_no_cycles counts)
        if self.closed is not None:
            raise Closed(self.closed.code, self.closed.reason)
        message = await asyncio.wait_for(self._from_app.get(), timeout)
        if message["type"] == "websocket.close":
            self.closed = Closed(message.get("code", 1000), message.get("reason", ""))
            raise Closed(self.closed.code, self.closed.reason)
        event: dict[str, Any] = json.loads(message["text"])
        self.events.append(event)
        return event

    async def until(self, type_: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next message of ``type_`` (``event`` for Twilio's messages)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = await self.recv(max(0.01, deadline - loop.time()))
            if event.get("type", event.get("event")) == type_:
                return event

    async def close_code(self, timeout: float = 10.0) -> int:
        """Read until the app closes the socket; its close code."""
        with contextlib.suppress(Closed):
            while True:
                await self.recv(timeout)
        assert self.closed is not None
        return self.closed.code

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type", e.get("event")) == type_]


@contextlib.asynccontextmanager
async def running_app(redis_url: str, data_dir: Path, *, clock: Clock | None = None,
                      **overrides: Any) -> AsyncIterator[tuple[Starlette, Gateway]]:
    """The gateway app, its lifespan started (tone plugin, ready) and stopped after.
    ``clock``: the sessions' (``manual_clock.ManualClock``: the test moves their time)."""
    config = GatewayConfig(**{"plugin": "tone", "redis_url": redis_url, "data_dir": data_dir,
                              "output_lead_ms": 300, "reaper_interval_s": 3600.0, **overrides})
    app = create_app(config, clock=clock)
    to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(message: dict[str, Any]) -> None:
        await from_app.put(message)

    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"},
                                        "state": {}}, to_app.get, send))
    await to_app.put({"type": "lifespan.startup"})
    started = await asyncio.wait_for(from_app.get(), 30)
    assert started["type"] == "lifespan.startup.complete", started
    gateway: Gateway = app.state.gateway
    for _ in range(3000):  # loading has no event of its own: a bounded poll (30 s)
        if not await gateway.readiness():
            break
        await asyncio.sleep(0.01)
    try:
        yield app, gateway
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(from_app.get(), 30)
        await lifespan


async def connect(app: Starlette, path: str = "/v1/realtime", query: str = "",
                  headers: Sequence[tuple[str, str]] = ()) -> MemorySocket:
    socket = MemorySocket(app, path, query, headers)
    await socket.open()
    return socket
