"""A resume served through the session's live owner on another process
(docs/architecture.md §8).

Both socket protocols use it: ``/v1/realtime`` resumes and a Twilio call's second
media stream.

Behind a load balancer a resume can reach any gateway process. When the session's
owner is another process that is alive, taking the session over would throw away
what only the owner has: the models' state and the reply in flight. So this
process relays the socket to the owner instead, frame for frame, and the client
sees exactly what a direct connection would show. Each owner's address sits in
Redis next to its heartbeat (``--advertise-url``).

Close codes pass through both ways, so a client's 1000 still ends the session
and any other drop still detaches it. If the owner goes away mid-relay the
client gets 1012 (service restart) and resumes again; by then the owner's
heartbeat lapses and the resume takes the session over.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from duplex.close_codes import CloseCode, close_reason, sendable
from gateway import tracing
from gateway.metrics import Metrics
from gateway.transports.codec import Frame
from gateway.transports.frames import SocketFrames

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.gateway import Gateway

log = logging.getLogger(__name__)

# A relayed socket names the process relaying it; its owner serves it itself, so a
# resume is relayed at most once, whatever the owner table says meanwhile.
RELAYED_BY_HEADER = "x-duplex-relayed-by"
CONNECT_TIMEOUT_S = 3.0


def _sendable(code: int) -> int:
    """A close code a close frame may carry; an abnormal end (1005/1006/1015, no
    frame) becomes 1001 "going away", which the owner treats as a drop."""
    return code if sendable(code) else CloseCode.GOING_AWAY


async def served_by_owner(client: SocketFrames, gateway: Gateway, session_id: str, path: str,
                          headers: Mapping[str, str], first: Sequence[Frame]) -> bool:
    """Serve ``client`` through the session's live owner on another process, if it
    has one this process can reach: ``path`` (with its query) on the owner's
    advertised address, the ``first`` messages already read here sent ahead. True
    once done."""
    if RELAYED_BY_HEADER in client.ws.headers:
        return False  # relayed here already: never twice
    address = await gateway.owner_elsewhere(session_id)
    if address is None:
        return False
    with tracing.relayed(session_id, client.ws.headers) as traced:
        # the owner's turns join the relay's trace (W3C traceparent on the upgrade)
        owner = await open_to_owner(f"{address.rstrip('/')}{path}", session_id,
                                    relayed_by=gateway.owner, headers={**headers, **traced},
                                    tls=relay_tls(gateway.config))
        if owner is None:
            return False
        await relay(client, owner, first, gateway.metrics)
    return True


def relay_tls(config: GatewayConfig) -> ssl.SSLContext:
    """What a ``wss://`` relay to another gateway trusts: ``--ssl-ca-file``, else the
    system's CAs plus this gateway's own certificate (gateways that share one
    self-signed certificate, as a development cluster does, trust each other)."""
    return _tls_context(config.ssl_ca_file, config.ssl_certfile)


@functools.lru_cache(maxsize=4)
def _tls_context(ca_file: Path | None, own_cert: Path | None) -> ssl.SSLContext:
    """Built once per process: loading a CA bundle takes milliseconds."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if ca_file is None and own_cert is not None:
        context.load_verify_locations(cafile=str(own_cert))
    return context


async def open_to_owner(url: str, session_id: str, *, relayed_by: str,
                        headers: dict[str, str],
                        tls: ssl.SSLContext | None = None) -> ClientConnection | None:
    """A socket to ``url`` on the owner, as ``relayed_by``; None when it can't be
    reached. A ``wss://`` owner is verified against ``tls``."""
    try:
        # the owner bounds what clients send; what it sends back is trusted
        return await connect(url, additional_headers={RELAYED_BY_HEADER: relayed_by, **headers},
                             open_timeout=CONNECT_TIMEOUT_S, max_size=None, compression=None,
                             ssl=tls if url.startswith("wss://") else None)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        log.warning("session %s: owner at %s unreachable (%s); serving it here",
                    session_id, url.partition("?")[0], exc)
        return None


async def relay(client: SocketFrames, owner: ClientConnection, first: Sequence[Frame],
                metrics: Metrics) -> None:
    """Send the ``first`` messages the client sent (already read here), then pass
    frames both ways until one side closes; then close the other alike."""
    metrics.resumes_relayed.inc()
    metrics.relays.inc()
    try:
        await _relay(client, owner, first)
    finally:
        metrics.relays.dec()


async def _relay(client: SocketFrames, owner: ClientConnection, first: Sequence[Frame]) -> None:
    try:
        for message in first:
            await owner.send(message)
    except ConnectionClosed:
        pass  # the owner's close reaches the client through the pump below
    up = asyncio.create_task(_client_to_owner(client, owner))
    down = asyncio.create_task(_owner_to_client(owner, client))
    try:
        done, _ = await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        if not all(task.result() for task in done):
            # a pump saw the far side go under a send: that side's own pump reads
            # its close code and passes it on
            await asyncio.wait([up, down], timeout=CONNECT_TIMEOUT_S)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        await owner.close(CloseCode.GOING_AWAY, "relay ended")  # a no-op once a close was passed on


async def _client_to_owner(client: SocketFrames, owner: ClientConnection) -> bool:
    """Client frames to the owner; True once the client has gone (its close passed on)."""
    try:
        while (frame := await client.receive()) is not None:
            await owner.send(frame)
    except ConnectionClosed:
        return False
    await owner.close(_sendable(client.close_code), close_reason(client.close_reason))
    return True


async def _owner_to_client(owner: ClientConnection, client: SocketFrames) -> bool:
    """Owner frames to the client; True once the owner has gone (its close passed on)."""
    try:
        async for frame in owner:
            await client.send(frame)
    except ConnectionClosed:
        pass
    except (RuntimeError, WebSocketDisconnect):
        return False
    received = owner.protocol.close_rcvd
    if received is None:
        code, reason = int(CloseCode.SERVICE_RESTART), "the session's owner went away; resume again"
    else:
        code, reason = _sendable(received.code), received.reason
    await client.close(code, reason)
    return True
