"""One worker of ``serve --workers N`` (``gateway.workers``): ``python -m
gateway.worker``, given its sockets by file descriptor and the configuration as
JSON on stdin by the parent.

It serves its relay address from the start and the shared port only once the
gateway is ready, then prints ``duplex-gateway worker K ready: ...``. Kept apart
from the parent's module so that the parent never imports the app (uvicorn,
Starlette, the plugins).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from dataclasses import replace

import uvicorn

from gateway import log_setup
from gateway.app import create_app
from gateway.config import decode_config
from gateway.gateway import Gateway
from gateway.http_limits import raise_open_files_limit
from gateway.serving import serve_on_loop, uvicorn_config
from gateway.workers import READY_MARK

READY_POLL_S = 0.2  # how often a starting worker asks whether it is ready yet


class _ListenWhenReady(uvicorn.Server):
    """A worker's server: the relay address from the start, the shared port once the
    gateway is ready (until then the kernel gives the port's connections to the
    workers that listen), and then the worker's ready line."""

    def __init__(self, config: uvicorn.Config, public: socket.socket, gateway: Gateway,
                 ready_line: str) -> None:
        super().__init__(config)
        self.public = public
        self.gateway = gateway
        self.ready_line = ready_line
        self._opener: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            self._opener = asyncio.create_task(self._listen_when_ready())

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._opener is not None:
            self._opener.cancel()
        await super().shutdown(sockets)

    async def _listen_when_ready(self) -> None:
        # readiness (models warm, Redis up) has no event of its own: polled, as the
        # app's own announcer does
        while await self.gateway.readiness():  # noqa: ASYNC110
            await asyncio.sleep(READY_POLL_S)
        config = self.config

        def protocol() -> asyncio.Protocol:  # as uvicorn's own startup() makes them
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state)

        self.servers.append(await asyncio.get_running_loop().create_server(
            protocol, sock=self.public, ssl=config.ssl, backlog=config.backlog))
        print(self.ready_line, flush=True)


def main() -> int:
    """The gateway on the sockets the parent passed."""
    spec = json.loads(sys.stdin.read())
    config = replace(decode_config(spec["config"]), advertise_url=spec["relay"], workers=1)
    log_setup.configure(config.log_level, config.log_format,
                        (config.api_key or "", config.twilio_auth_token or "",
                         config.plivo_auth_token or "",
                         config.exotel_credentials or "", config.vonage_signature_secret or ""))
    raise_open_files_limit()
    # socket(fileno=) reads the family, type and protocol back (IPPROTO_TCP: see
    # gateway.serving.listen)
    public = socket.socket(fileno=spec["public_fd"])
    private = socket.socket(fileno=spec["private_fd"])
    app = create_app(config, settle_heap=True)
    me = f"duplex-gateway worker {spec['index']}"
    print(f"{me} starting: pid {os.getpid()}, relays at {spec['relay']} (its /readyz says "
          f"what it waits for)", flush=True)
    ready = f"{READY_MARK.format(index=spec['index'])} pid {os.getpid()}, relays at {spec['relay']}"
    server = _ListenWhenReady(uvicorn_config(config, app), public, app.state.gateway, ready)
    serve_on_loop(config, server, [private])
    return 0


if __name__ == "__main__":
    sys.exit(main())
