"""The composition root: the only place that wires concrete parts together."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from duplex.fence import Fence
from duplex.session import SessionCore
from duplex.store.base import SessionStore
from duplex.store.client import connect
from duplex.store.redis_store import RedisSessionStore
from gateway.config import GatewayConfig
from gateway.emitter import Emitter
from gateway.metrics import Metrics
from gateway.realtime import realtime_endpoint
from gateway.session_runner import RunnerLimits, SessionRunner
from orchestrator.base import StagePool
from orchestrator.duplex import DuplexOrchestrator
from orchestrator.engine import InProcessEngine
from plugins.base import DuplexModelPlugin
from plugins.registry import load_plugin

log = logging.getLogger("duplex_gateway")

WEB_DEMO = Path(__file__).resolve().parent.parent / "web_demo"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Gateway:
    """Process-wide state: store, plugin, orchestrator, the sessions it runs."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.metrics = Metrics()
        self.store: SessionStore | None = None
        self.plugin: DuplexModelPlugin | None = None
        self.orchestrator: DuplexOrchestrator | None = None
        self.runners: dict[str, SessionRunner] = {}
        self.not_ready = "starting"
        self._orchestrator_task: asyncio.Task[None] | None = None

    async def start(self, tg: asyncio.TaskGroup) -> None:
        url = self.config.redis_url
        if url is None:
            raise RuntimeError("no Redis URL: the CLI starts the embedded Valkey first")
        store = RedisSessionStore(connect(url))
        self.store = store
        self.not_ready = "loading plugin"
        try:
            plugin = load_plugin(self.config.plugin)
            await asyncio.to_thread(plugin.load)
        except Exception as exc:
            self.not_ready = f"plugin {self.config.plugin!r} failed to load: {exc}"
            log.error("%s", self.not_ready)
            return
        self.plugin = plugin
        names = plugin.capabilities.stage_names
        pools = [StagePool([InProcessEngine(i, name, model)])
                 for i, (name, model) in enumerate(zip(names, plugin.stage_models(),
                                                       strict=True))]
        self.orchestrator = DuplexOrchestrator(
            pools, lambda stage, seconds: self.metrics.stage_latency.labels(
                names[stage]).observe(seconds))
        self._orchestrator_task = tg.create_task(self.orchestrator.run(), name="orchestrator")
        self.not_ready = ""

    async def readiness(self) -> str:
        """Empty when ready, else why not."""
        if self.not_ready:
            return self.not_ready
        assert self.store is not None
        try:
            await self.store.ping()
        except Exception as exc:
            return f"store unreachable: {exc}"
        return ""

    async def open_session(self, *, beta: bool) -> tuple[SessionRunner, str]:
        """Admit a new session (raises ``CapacityError``); returns it and its resume token."""
        assert self.store and self.orchestrator and self.plugin
        sid = "sess_" + secrets.token_urlsafe(18)
        token = secrets.token_urlsafe(32)
        core = SessionCore(Fence(sid, 1, 0, 0), beta=beta)
        cfg = self.config
        record = await self.store.open_session(
            sid, owner=self.owner, token_digest=token_digest(token), config="{}",
            now=time.time(), max_sessions=cfg.max_sessions,
            max_sessions_per_owner=cfg.max_sessions_per_process, idle_ttl_s=cfg.idle_ttl_s,
            grace_s=cfg.disconnect_grace_s)
        emitter = Emitter(self.store, sid, self.owner, record.incarnation,
                          last_seq=record.last_seq, beta=beta,
                          journal_max=cfg.journal_max_events, metrics=self.metrics)
        limits = RunnerLimits(lead_ms=cfg.output_lead_ms,
                              max_pending_commands=cfg.max_pending_commands,
                              journal_max=cfg.journal_max_events)
        runner = SessionRunner(core, emitter, self.store, self.orchestrator, self.plugin,
                               self.metrics, limits)
        self.orchestrator.attach(sid, runner)
        self.runners[sid] = runner
        self.metrics.sessions.inc()
        self.metrics.sessions_opened.inc()
        runner.on_closed.append(self._forget)
        return runner, token

    def _forget(self, runner: SessionRunner) -> None:
        if self.runners.pop(runner.session_id, None) is not None:
            self.metrics.sessions.dec()

    async def stop(self) -> None:
        for runner in list(self.runners.values()):
            runner.request_close("shutdown")
        if self._orchestrator_task is not None:
            self._orchestrator_task.cancel()
        if self.store is not None:
            await self.store.close()


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    why = await gateway.readiness()
    if why:
        return JSONResponse({"ready": False, "reason": why}, status_code=503)
    return JSONResponse({"ready": True, "plugin": gateway.config.plugin,
                         "sessions": len(gateway.runners)})


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
