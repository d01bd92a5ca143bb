"""The composition root: routes, lifespan, and the one ``Gateway`` of the process."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from gateway import heap, tracing
from gateway.auth import AccessPolicy
from gateway.config import GatewayConfig
from gateway.gateway import LOADING, Gateway
from gateway.realtime import realtime_endpoint
from gateway.session.clock import Clock
from gateway.telephony import exotel, vonage
from gateway.telephony.plivo import plivo_off, plivo_routes
from gateway.telephony.telnyx import telnyx_off, telnyx_routes
from gateway.telephony.twilio import twilio_routes

log = logging.getLogger("duplex_gateway")


def web_demo_dir() -> Path:
    """The browser demo's folder. It is package data of ``web_demo``, so this is the
    same in a checkout, an editable install and an installed wheel, from any cwd."""
    return Path(str(importlib.resources.files("web_demo")))


async def healthz(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    why = gateway.health()
    if why:
        return JSONResponse({"status": "unhealthy", "reason": why}, status_code=503)
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Status and reason for anyone (a load balancer probes it); the owner id, the
    advertised address and the session count only for holders of the key."""
    gateway: Gateway = request.app.state.gateway
    access: AccessPolicy = request.app.state.access
    why = await gateway.readiness()
    if why:
        return JSONResponse({"ready": False, "reason": why}, status_code=503)
    if not access.may_observe(request.headers):
        return JSONResponse({"ready": True})
    return JSONResponse({"ready": True, "plugin": gateway.config.plugin,
                         "sessions": len(gateway.runners), "owner": gateway.owner,
                         "advertised": gateway.config.advertise_url})


async def metrics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    access: AccessPolicy = request.app.state.access
    if not access.may_observe(request.headers):
        return Response("the API key is required (Authorization: Bearer <key>)",
                        status_code=401, headers={"WWW-Authenticate": "Bearer"},
                        media_type="text/plain")
    return Response(gateway.metrics.render(), media_type="text/plain; version=0.0.4")


async def _announce(gateway: Gateway, line: str | None, settle_heap: bool) -> None:
    """Print ``line`` once the gateway can take sessions (models warm, Redis up);
    until then say what it is waiting for whenever that changes. With
    ``settle_heap``, what is alive by then is frozen out of the garbage
    collector's way first (``gateway.heap``)."""
    said = ""
    while why := await gateway.readiness():
        # a loading step is logged by the loader as it starts (Gateway._progress)
        if why != said and not why.startswith(LOADING):
            log.info("not ready yet: %s", why)
        said = why
        await asyncio.sleep(0.2)
    if settle_heap:
        gateway.metrics.gc_frozen.set(heap.settle())
    if line:
        print(line, flush=True)


def create_app(config: GatewayConfig, *, on_ready: str | None = None,
               settle_heap: bool = False, clock: Clock | None = None) -> Starlette:
    """The gateway's app. ``settle_heap`` is for a process that serves it and nothing
    else (``gateway.heap.settle``): the CLI's, not a test's. ``clock``: the sessions'
    (``gateway.session.clock``; a test's, to drive their time)."""
    gateway = Gateway(config, clock)
    access = AccessPolicy.of(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if access.twilio_off:
            log.warning("the Twilio routes (/v1/twilio/*) are off: %s", access.twilio_off)
        for carrier, why in (("Telnyx", telnyx_off(config)), ("Plivo", plivo_off(config)),
                             ("Vonage", vonage.off_reason(config)),
                             ("Exotel", exotel.off_reason(config))):
            if why:
                log.info("the %s routes (/v1/%s/*) are off: %s", carrier, carrier.lower(), why)
        tracing.start(config)
        async with asyncio.TaskGroup() as tg:
            await gateway.start(tg)
            announcer = tg.create_task(_announce(gateway, on_ready, settle_heap))
            try:
                yield
            finally:
                announcer.cancel()
                await gateway.stop()
                await asyncio.to_thread(tracing.stop)  # what is buffered goes out

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        WebSocketRoute("/realtime", realtime_endpoint),
        *twilio_routes(access, config),
        *telnyx_routes(config),
        *plivo_routes(config),
        *vonage.vonage_routes(config),
        *exotel.exotel_routes(config),
        Mount("/", StaticFiles(directory=web_demo_dir(), html=True), name="web_demo"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = gateway
    app.state.access = access
    return app
