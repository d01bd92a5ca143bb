"""How one gateway process serves: its listening socket, the URL the other
processes reach it at, the lines it prints, uvicorn's configuration and the
event loop it runs on.

Shared by the one-process gateway (``gateway.cli``) and by ``--workers N``
(the parent, ``gateway.workers``, and each worker, ``gateway.worker``), so none
of them imports another for these.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.admission import Admission, backlog
from gateway.config import GatewayConfig
from gateway.http_limits import guarded_http

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets it knows are
    # TCP, and Nagle would hold each small event back ~20 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def reachable_at(host: str, port: int, *, tls: bool) -> str:
    """The ws:// (wss:// with TLS) URL other gateway processes use to reach this one."""
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    scheme = "wss" if tls else "ws"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``--loop`` names; None for asyncio's own. uvloop's I/O runs in
    C (libuv), which cuts the per-message cost of the socket path."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("duplex-gateway: --loop uvloop, but uvloop is not installed "
                             "(pip install uvloop, or --loop asyncio)") from None
        return None
    return uvloop.new_event_loop


def serve_on_loop(config: GatewayConfig, server: uvicorn.Server,
                  sockets: list[socket.socket]) -> None:
    """Run ``server`` on ``sockets`` in the event loop ``--loop`` names."""
    factory = loop_factory(config.loop)
    logging.getLogger("duplex_gateway").debug(
        "event loop: %s", "asyncio" if factory is None else "uvloop")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(server.serve(sockets=sockets))


def banners(config: GatewayConfig, host: str, port: int, note: str = "") -> tuple[str, str]:
    """The "listening" line, and the "ready" line printed once sessions can start."""
    shown = f"[{host}]" if ":" in host else host
    http, ws = ("https", "wss") if config.tls else ("http", "ws")
    ready = (f"duplex-gateway ready: {http}://{shown}:{port}/  "
             f"(plugin {config.plugin}, realtime {ws}://{shown}:{port}/v1/realtime{note})")
    listening = (f"duplex-gateway listening: {http}://{shown}:{port}/ (getting ready; "
                 f"/readyz says what it waits for)")
    return listening, ready


def uvicorn_config(config: GatewayConfig, app: Starlette) -> uvicorn.Config:
    import uvicorn

    from gateway.ws_reads import DirectReads

    shed = app.state.gateway.metrics.connections_shed
    admission = Admission(fd_reserve=config.fd_reserve,
                          per_address=config.max_incomplete_per_address,
                          max_connections=config.max_connections,
                          on_shed=lambda reason: shed.labels(reason).inc())
    return uvicorn.Config(
        app, log_level=config.log_level, lifespan="on",
        ws_max_size=max(16 * 1024 * 1024, 2 * config.max_message_bytes),
        ws_ping_interval=20.0, ws_ping_timeout=20.0, log_config=None,
        ws_per_message_deflate=config.ws_compression == "deflate",
        ssl_certfile=config.ssl_certfile, ssl_keyfile=config.ssl_keyfile,
        http=guarded_http(config.header_timeout_s, admission), ws=DirectReads,
        limit_concurrency=config.max_connections or None,
        backlog=backlog(config.fd_reserve, config.max_connections),
        timeout_graceful_shutdown=max(1, round(config.shutdown_timeout_s)))
