"""The composition root: routes, lifespan, and the one ``Gateway`` of the process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from gateway.config import GatewayConfig
from gateway.gateway import Gateway
from gateway.realtime import realtime_endpoint

WEB_DEMO = Path(__file__).resolve().parent.parent / "web_demo"


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    why = await gateway.readiness()
    if why:
        return JSONResponse({"ready": False, "reason": why}, status_code=503)
    return JSONResponse({"ready": True, "plugin": gateway.config.plugin,
                         "sessions": len(gateway.runners), "owner": gateway.owner})


async def metrics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    return Response(gateway.metrics.render(), media_type="text/plain; version=0.0.4")


def create_app(config: GatewayConfig, *, on_ready: str | None = None) -> Starlette:
    gateway = Gateway(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with asyncio.TaskGroup() as tg:
            await gateway.start(tg)
            if on_ready:
                print(on_ready, flush=True)
            try:
                yield
            finally:
                await gateway.stop()

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        WebSocketRoute("/v1/realtime", realtime_endpoint),
        WebSocketRoute("/realtime", realtime_endpoint),
        Mount("/", StaticFiles(directory=WEB_DEMO, html=True), name="web_demo"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = gateway
    return app
