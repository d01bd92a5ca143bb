"""``/v1/realtime``: the OpenAI Realtime WebSocket protocol adapter.

The reader turns wire messages into core commands and queues them on the
session's mailbox; the session's worker is the only writer of server events.
Errors are split by cause in ``duplex.errors`` and become ``error`` events
here, at the boundary; one bad message never ends the connection.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import TYPE_CHECKING

from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex import commands as c
from duplex.errors import CapacityError, DuplexError, InvalidRequest, SessionStateError
from duplex.events import ServerEvent, event

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.session_runner import SessionRunner

log = logging.getLogger(__name__)

KEY_SUBPROTOCOL = "openai-insecure-api-key."
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"


class WsAttachment:
    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def send_text(self, text: str) -> None:
        await self.ws.send_text(text)


def _offered_key(ws: WebSocket, protocols: list[str]) -> str | None:
    auth = ws.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for proto in protocols:
        if proto.startswith(KEY_SUBPROTOCOL):
            return proto[len(KEY_SUBPROTOCOL):]
    return None


async def _refuse(ws: WebSocket, error: DuplexError, close_code: int) -> None:
    await ws.send_text(json.dumps({"type": "error", "error": error.to_wire()}))
    await ws.close(close_code, error.message[:120])


async def realtime_endpoint(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    protocols = list(ws.scope.get("subprotocols") or [])
    # Browsers fail the handshake unless we pick "realtime" when they offer it.
    await ws.accept(subprotocol="realtime" if "realtime" in protocols else None)
    expected = gateway.config.api_key
    if expected is not None:
        offered = _offered_key(ws, protocols) or ""
        if not hmac.compare_digest(offered.encode(), expected.encode()):
            log.warning("refused a connection with a missing or wrong API key")
            await _refuse(ws, InvalidRequest("invalid or missing API key",
                                             code="invalid_api_key"), 1008)
            return
    if await gateway.readiness():
        await _refuse(ws, DuplexError("the gateway is not ready", code="not_ready"), 1013)
        return
    beta = ("realtime=v1" in ws.headers.get("openai-beta", "")
            or BETA_SUBPROTOCOL in protocols)
    try:
        runner, token = await gateway.open_session(beta=beta)
    except CapacityError as exc:
        gateway.metrics.sessions_rejected.labels(exc.code).inc()
        await _refuse(ws, exc, 1013)
        return
    except DuplexError as exc:
        await _refuse(ws, exc, 1011)
        return
    runner.emitter.attachment = WsAttachment(ws)
    await runner.emitter.publish([runner.core.created_event(token)])
    await _serve(ws, runner, gateway.config.max_message_bytes)


async def _serve(ws: WebSocket, runner: SessionRunner, max_bytes: int) -> None:
    async with asyncio.TaskGroup() as tg:
        session = tg.create_task(runner.run(), name=f"session-{runner.session_id}")
        reader = tg.create_task(_read(ws, runner, max_bytes), name="reader")
        await runner.closed.wait()
        reader.cancel()
        await session
    await _answer_late(ws)
    try:
        await ws.close(1000)
    except (RuntimeError, WebSocketDisconnect):
        pass  # already closed by the peer


async def _read(ws: WebSocket, runner: SessionRunner, max_bytes: int) -> None:
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            _dispatch(runner, msg.get("text"), msg.get("bytes"), max_bytes)
    except (WebSocketDisconnect, RuntimeError):
        pass
    runner.emitter.attachment = None
    runner.request_close("disconnect")


def _dispatch(runner: SessionRunner, text: str | None, data: bytes | None,
              max_bytes: int) -> None:
    size = len(text.encode()) if text is not None else len(data or b"")
    try:
        if size > max_bytes:
            raise InvalidRequest(f"message of {size} bytes exceeds the {max_bytes}-byte limit",
                                 code="event_too_large")
        if text is None:
            # Extension: binary frames are raw audio in the session's input format.
            runner.submit(c.AppendAudio(None, data or b""))
            return
        try:
            obj = json.loads(text, parse_constant=_no_constants)
        except ValueError:
            raise InvalidRequest("message is not valid JSON", code="invalid_json") from None
        runner.submit(c.parse_command(obj))
    except DuplexError as exc:
        runner.report(exc)


def _no_constants(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN/Infinity: Python accepts them, JSON does not


async def _answer_late(ws: WebSocket) -> None:
    """Commands that arrive after the session ended get a clear refusal."""
    refusal = SessionStateError("the session is closed", code="session_closed")
    try:
        while True:
            msg = await asyncio.wait_for(ws.receive(), 0.05)
            if msg["type"] == "websocket.disconnect":
                return
            await ws.send_text(json.dumps(event(ServerEvent.ERROR, error=refusal.to_wire())))
    except (TimeoutError, RuntimeError, WebSocketDisconnect):
        return
