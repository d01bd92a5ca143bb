"""Twilio Media Streams (bidirectional ``<Connect><Stream>``) as a session adapter.

A call is an ordinary session: inbound ``media`` becomes ``AppendAudio`` in
``audio/pcmu``, ``dtmf`` a journaled ``DtmfReceived``, ``stop`` the session's
end. Going out, the journaled events the session sends its attachment are
translated: each ``response.output_audio.delta`` becomes a ``media`` message
and a ``mark`` named ``<response id>:<cumulative ms>``; a barge-in
(``input_audio_buffer.speech_started``) while the caller still has audio
buffered becomes a ``clear`` plus a ``conversation.item.truncate`` at the ms
of the last mark Twilio echoed *before* the clear. Marks echoed after it
prove nothing (Twilio echoes pending marks on ``clear``), and wall-clock time
is never used (I6). Pacing is the runner's ``--output-lead-ms``: Twilio plays
what it buffers in order, so a bounded lead is all it needs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex import commands as c
from duplex import wire
from duplex.close_codes import CloseCode
from duplex.errors import CapacityError, DuplexError, InvalidRequest
from duplex.store.client import connect
from gateway import sockets
from gateway.auth import AccessPolicy
from gateway.config import GatewayConfig
from gateway.log_limits import LogLimiter
from gateway.owner_relay import RELAYED_BY_HEADER, served_by_owner
from gateway.telephony.attachment import TwilioAttachment
from gateway.telephony.calls import Binding, CallRegistry
from gateway.telephony.security import (
    mint_stream_token,
    relay_proof,
    relay_proof_ok,
    signature_ok,
    stream_token_ok,
)
from gateway.ws_reads import delivering

if TYPE_CHECKING:
    from gateway.gateway import Gateway

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/twilio/voice"
STREAM_PATH = "/v1/twilio/media-stream"
RELAY_PROOF_HEADER = "x-duplex-relay-proof"
TOKEN_TTL_S = 600  # a stream (or a duplicate one) connects right after the webhook
START_TIMEOUT_S = 10.0
TOUCH_EVERY_S = 30.0
PCMU_SESSION = {"audio": {"input": {"format": {"type": "audio/pcmu"}},
                          "output": {"format": {"type": "audio/pcmu"}}}}


class TwilioBridge:
    """Process-wide Twilio state: the token secret and the call registry."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        # Every gateway behind the same number must accept the others' TwiML: the
        # key derives from the auth token, or without one is shared in Redis.
        seed = config.twilio_auth_token
        self._secret = ("dg-twilio-stream\n" + seed).encode() if seed else None
        self._registry: CallRegistry | None = None

    async def secret(self) -> bytes:
        """The key of stream tokens and relay proofs."""
        if self._secret is None:
            self._secret = await self.registry.shared_secret()
        return self._secret

    @property
    def registry(self) -> CallRegistry:
        if self._registry is None:  # lazily: the client must be made on the loop
            cfg = self.config
            client = connect(cfg.redis_url or "unix:///nonexistent",
                             timeout_s=cfg.store_timeout_s)
            # a binding lives as long as its session can (a day where sessions never end)
            self._registry = CallRegistry(client, (cfg.max_session_s or 24 * 3600.0)
                                          + cfg.disconnect_grace_s)
        return self._registry

    def public_base(self, scheme: str, host: str) -> str:
        return (self.config.public_url or f"{scheme}://{host}").rstrip("/")

    def stream_url(self, scheme: str, host: str) -> str:
        base = self.public_base(scheme, host)
        ws_base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return ws_base + STREAM_PATH


def twilio_routes(access: AccessPolicy) -> list[BaseRoute]:
    """The webhook and the media stream; with ``access.twilio_off``, routes that
    refuse everything (nothing could tell Twilio from anyone else)."""
    if access.twilio_off:
        return [Route(VOICE_PATH, _off_webhook, methods=["POST"]),
                WebSocketRoute(STREAM_PATH, _off_stream)]
    return [Route(VOICE_PATH, voice_webhook, methods=["POST"]),
            WebSocketRoute(STREAM_PATH, media_stream_endpoint)]


async def _off_webhook(request: Request) -> Response:
    return Response("the Twilio routes are off on this gateway (its startup log says why)",
                    status_code=404, media_type="text/plain")


async def _off_stream(ws: WebSocket) -> None:
    await ws.close(CloseCode.POLICY)  # before the accept: the upgrade is answered 403


# -- the webhook -------------------------------------------------------------------------


def _attr(value: str) -> str:
    """A double-quoted XML attribute (quoteattr may pick single quotes)."""
    return '"' + escape(value, {'"': "&quot;"}) + '"'


async def voice_webhook(request: Request) -> Response:
    """``POST /v1/twilio/voice``: TwiML connecting the call to our media stream."""
    bridge: TwilioBridge = request.app.state.twilio
    form = await request.form()
    params = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    auth = bridge.config.twilio_auth_token
    if auth is not None:
        url = bridge.public_base(request.url.scheme, request.url.netloc) + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        if not signature_ok(auth, url, params, request.headers.get("x-twilio-signature")):
            log.warning("twilio webhook refused: bad or missing X-Twilio-Signature for %s", url)
            return Response("invalid signature", status_code=403, media_type="text/plain")
    call_sid = dict(params).get("CallSid", "")
    if not call_sid:
        return Response("CallSid is required", status_code=400, media_type="text/plain")
    instructions = request.query_params.get("instructions",
                                              bridge.config.twilio_instructions or "")
    try:
        secret = await bridge.secret()
    except DuplexError as exc:
        log.warning("twilio webhook failed: %s", exc.message)
        return Response("store unavailable", status_code=503, media_type="text/plain")
    token = mint_stream_token(secret, call_sid, instructions, int(time.time()) + TOKEN_TTL_S)
    stream_url = bridge.stream_url(request.url.scheme, request.url.netloc)
    twiml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Connect>"
             f"<Stream url={_attr(stream_url)}>"
             f"<Parameter name=\"token\" value={_attr(token)}/>"
             + (f"<Parameter name=\"instructions\" value={_attr(instructions)}/>"
                if instructions else "")
             + "</Stream></Connect></Response>")
    return Response(twiml, media_type="application/xml")


# -- the media stream socket --------------------------------------------------------------


@sockets.total
async def media_stream_endpoint(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    bridge: TwilioBridge = ws.app.state.twilio
    access: AccessPolicy = ws.app.state.access
    await ws.accept()
    refusal = access.origin_refusal(ws.headers)
    if refusal is not None:  # a browser page; Twilio sends no Origin
        log.warning("twilio media stream refused: %s", refusal.message)
        await sockets.close(ws, CloseCode.POLICY, refusal.code)
        return
    try:
        secret = await bridge.secret()
    except DuplexError as exc:
        log.warning("twilio media stream refused: %s", exc.message)
        await sockets.close(ws, CloseCode.INTERNAL_ERROR, exc.code)
        return
    auth = bridge.config.twilio_auth_token
    if auth is not None:
        url = bridge.stream_url("wss" if ws.url.scheme == "wss" else "ws", ws.url.netloc)
        if not (signature_ok(auth, url, (), ws.headers.get("x-twilio-signature"))
                or relay_proof_ok(secret, ws.headers.get(RELAYED_BY_HEADER),
                                  ws.headers.get(RELAY_PROOF_HEADER))):
            log.warning("twilio media stream refused: bad or missing X-Twilio-Signature "
                        "for %s", url)
            await sockets.close(ws, CloseCode.POLICY, "invalid signature")
            return
    stream = _Stream(ws, gateway.config.max_message_bytes, LogLimiter(log))
    try:
        await _serve(stream, gateway, bridge, secret)
    finally:
        stream.ignored.flush()


async def _serve(stream: _Stream, gateway: Gateway, bridge: TwilioBridge,
                 secret: bytes) -> None:
    ws = stream.ws
    started = await _await_start(stream, secret)
    if started is None:
        return
    start, first = started
    why = await gateway.readiness(fresh=False)
    if why:
        log.warning("twilio media stream refused: the gateway is not ready: %s", why)
        await sockets.close(ws, CloseCode.TRY_AGAIN_LATER, "not ready")
        return
    attachment = await _bind(ws, gateway, bridge, start, first)
    if attachment is None:
        return  # refused, or served through the session's owner
    async with asyncio.TaskGroup() as tg:
        reader = tg.create_task(_read(stream, attachment, bridge))
        await attachment.ended.wait()
        reader.cancel()


@dataclass(frozen=True, slots=True)
class _Stream:
    """One media stream socket: its size limit and its rate-limited ignore log."""

    ws: WebSocket
    max_bytes: int
    ignored: LogLimiter

    def ignore(self, kind: str, call: str, why: str) -> None:
        """Twilio sent something we cannot use: say so (rate-limited), go on."""
        self.ignored.warning(kind, "call %s: ignored %s", call, why)


@dataclass(frozen=True, slots=True)
class _Start:
    stream_sid: str
    call_sid: str
    instructions: str


def _parse(stream: _Stream, text: str | None, call: str) -> dict[str, Any] | None:
    """One Twilio message, or None (logged, rate-limited) for anything malformed."""
    if text is None:
        stream.ignore("binary", call, "a binary frame")
        return None
    try:
        msg = wire.decode_json(text, max_bytes=stream.max_bytes)
    except InvalidRequest as exc:
        stream.ignore(exc.code, call, f"a message that is not usable JSON ({exc.code})")
        return None
    if not isinstance(msg, dict) or not isinstance(msg.get("event"), str):
        stream.ignore("no_event", call, "a message without an event name")
        return None
    return msg


async def _await_start(stream: _Stream, secret: bytes) -> tuple[_Start, list[str]] | None:
    """Read up to ``start`` and check it (token, media format); None when refused.
    Also returns the `connected` and `start` messages as sent (a relay passes them on)."""
    ws = stream.ws
    deadline = time.monotonic() + START_TIMEOUT_S
    read: list[str] = []
    while True:
        try:
            raw = await asyncio.wait_for(ws.receive(), max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            await sockets.close(ws, CloseCode.POLICY, "no start message")
            return None
        if raw["type"] == "websocket.disconnect":
            return None
        msg = _parse(stream, raw.get("text"), "(before start)")
        if msg is not None and msg["event"] == "connected" and not read:
            read.append(raw["text"])  # kept for a relay (junk is not: bounded, I8)
        if msg is None or msg["event"] != "start":
            continue  # "connected", or junk before start
        read.append(raw["text"])
        refusal, start = _check_start(msg, secret)
        if start is not None:
            return start, read
        log.warning("twilio media stream refused: %s", refusal)
        await sockets.close(ws, CloseCode.POLICY, refusal)
        return None


def _check_start(msg: dict[str, Any], secret: bytes) -> tuple[str, _Start | None]:
    body = msg.get("start")
    if not isinstance(body, dict):
        return "start without a start object", None
    stream_sid = msg.get("streamSid") or body.get("streamSid")
    call_sid = body.get("callSid")
    if not isinstance(stream_sid, str) or not isinstance(call_sid, str) or not call_sid:
        return "start without streamSid/callSid", None
    fmt = body.get("mediaFormat") or {}
    if (not isinstance(fmt, dict) or fmt.get("encoding") != "audio/x-mulaw"
            or str(fmt.get("sampleRate")) != "8000"):
        return f"unsupported media format {fmt!r:.80}", None
    params = body.get("customParameters") or {}
    params = params if isinstance(params, dict) else {}
    instructions = params.get("instructions") or ""
    if not isinstance(instructions, str) or not stream_token_ok(
            secret, params.get("token"), call_sid, instructions, time.time()):
        return f"call {call_sid[:40]}: bad or expired stream token", None
    return "", _Start(stream_sid, call_sid, instructions)


async def _bind(ws: WebSocket, gateway: Gateway, bridge: TwilioBridge, start: _Start,
                first: list[str]) -> TwilioAttachment | None:
    """Resume the call's session if it has one, else open one; attach this socket.
    None when refused, or once served through the session's owner elsewhere."""
    try:
        binding = await bridge.registry.get(start.call_sid)
        if binding is None:
            opened = await _open(ws, gateway, bridge, start)
            if opened is not None:
                return opened
            # another stream of this call bound its session first (on any process)
            binding = await bridge.registry.get(start.call_sid)
            if binding is None:
                return None
        if await _relayed_to_owner(ws, gateway, bridge, binding.session_id, first):
            return None
        attachment = await _resume(ws, gateway, bridge, start, binding)
        if attachment is not None:
            return attachment
        return await _open(ws, gateway, bridge, start)
    except DuplexError as exc:
        log.warning("call %s: no session: %s", start.call_sid, exc.message)
        await sockets.close(ws, CloseCode.TRY_AGAIN_LATER if isinstance(exc, CapacityError)
                            else CloseCode.INTERNAL_ERROR, exc.code)
        return None


async def _relayed_to_owner(ws: WebSocket, gateway: Gateway, bridge: TwilioBridge,
                            sid: str, first: list[str]) -> bool:
    """A second stream of a call whose session lives on another process: relay it
    there (``gateway.owner_relay``) rather than fork or take the call over."""
    headers = {RELAY_PROOF_HEADER: relay_proof(await bridge.secret(), gateway.owner)}
    return await served_by_owner(ws, gateway, sid, STREAM_PATH, headers, first)


async def _open(ws: WebSocket, gateway: Gateway, bridge: TwilioBridge,
                start: _Start) -> TwilioAttachment | None:
    """A new session for the call; None when another stream of it bound one first."""
    runner, token = await gateway.open_session(beta=False)
    binding = Binding(runner.session_id, token)
    if not await bridge.registry.put(start.call_sid, binding, only_new=True):
        # another socket of this call bound a session first: the caller joins it
        runner.request_close("duplicate_call")
        return None
    attachment = TwilioAttachment(ws, start.stream_sid, start.call_sid, 1, runner)
    await runner.attach(attachment, resume_token=token, cursor=None)
    update: dict[str, Any] = {**PCMU_SESSION}
    if start.instructions:
        update["instructions"] = start.instructions
    attachment.submit(c.UpdateSession(None, update))
    log.info("call %s: session %s (stream %s)", start.call_sid, runner.session_id,
             start.stream_sid)
    return attachment


async def _resume(ws: WebSocket, gateway: Gateway, bridge: TwilioBridge, start: _Start,
                  binding: Binding) -> TwilioAttachment | None:
    """A second socket for a call takes its session over (the first one is closed)."""
    sid = binding.session_id
    try:
        _, last = await gateway.store.journal_bounds(sid)
        runner, token, generation = await gateway.resume_session(
            sid, binding.resume_token, last, beta=False)
    except DuplexError as exc:
        log.info("call %s: session %s not resumable (%s); opening a new one",
                 start.call_sid, sid, exc.code)
        await bridge.registry.drop(start.call_sid)
        return None
    await bridge.registry.put(start.call_sid, Binding(sid, token), only_new=False)
    attachment = TwilioAttachment(ws, start.stream_sid, start.call_sid, generation, runner)
    await runner.attach(attachment, resume_token=token, cursor=last)
    runner.confirm_token(generation)  # the stream token already proved who we are
    log.info("call %s: stream %s took session %s over", start.call_sid, start.stream_sid, sid)
    return attachment


async def _read(stream: _Stream, attachment: TwilioAttachment, bridge: TwilioBridge) -> None:
    runner = attachment.runner
    stopped = False
    touched = time.monotonic()

    def deliver(text: str | None, data: bytes | None) -> bool:
        """A message straight from the socket's parser (``gateway.ws_reads``): taken
        unless this loop must act on it (a stop, a replaced socket, a registry touch
        that is due)."""
        if (not runner.serves(attachment)
                or time.monotonic() - touched > TOUCH_EVERY_S):
            return False
        msg = _parse(stream, text, attachment.call_sid)
        if msg is not None:
            if msg["event"] == "stop":
                return False
            _take(stream, msg, attachment)
        return True

    with delivering(stream.ws, deliver):
        try:
            while True:
                raw = await stream.ws.receive()
                if raw["type"] == "websocket.disconnect":
                    break
                if not runner.serves(attachment):
                    # replaced, ended or detached: this socket no longer speaks for the call
                    await attachment.end(CloseCode.NORMAL, "detached")
                    return
                msg = _parse(stream, raw.get("text"), attachment.call_sid)
                if msg is None:
                    continue
                if msg["event"] == "stop":
                    stopped = True
                    break
                _take(stream, msg, attachment)
                if time.monotonic() - touched > TOUCH_EVERY_S:
                    touched = time.monotonic()
                    await bridge.registry.touch(attachment.call_sid)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the peer went away, or we closed the socket
    if attachment.ended.is_set():
        return
    if stopped:  # the call is over: one terminal, and forget the call
        runner.client_closed("twilio_stop")
        await bridge.registry.drop(attachment.call_sid)
        await attachment.ended.wait()
        return
    # Twilio does not reconnect, but a second socket for the call may resume it.
    attachment.ended.set()
    runner.request_detach(attachment)


def _take(stream: _Stream, msg: dict[str, Any], attachment: TwilioAttachment) -> None:
    """One message after ``start``. Total: whatever it holds, the call goes on."""
    try:
        _dispatch(stream, msg, attachment)
    except Exception:  # a bug of ours on one message: that message is lost, not the call
        stream.ignored.warning("failed", "call %s: a Twilio %s message failed",
                               attachment.call_sid, str(msg["event"])[:40], exc_info=True)


def _dispatch(stream: _Stream, msg: dict[str, Any], attachment: TwilioAttachment) -> None:
    """One message after ``start``; malformed ones are logged (rate-limited) and ignored."""
    call, event = attachment.call_sid, msg["event"]
    if msg.get("streamSid") != attachment.stream_sid:
        stream.ignore("stream_sid", call, f"{event[:40]!r} for another stream")
        return
    body = msg.get(event)
    if not isinstance(body, dict):
        if event not in ("connected", "start"):
            stream.ignore("no_body", call, f"{event[:40]!r} without its {event[:40]!r} object")
        return
    match event:
        case "media":
            track, payload = body.get("track", "inbound"), body.get("payload")
            if not isinstance(track, str) or not isinstance(payload, str):
                stream.ignore("media_type", call, "media whose track/payload is not a string")
            elif track in ("inbound", "inbound_track"):
                _media(stream, payload, attachment)
        case "mark":
            name = body.get("name")
            if isinstance(name, str):
                attachment.on_mark(name)
            else:
                stream.ignore("mark_type", call, "a mark whose name is not a string")
        case "dtmf":
            digit = body.get("digit")
            if isinstance(digit, str) and digit:
                attachment.submit(c.DtmfReceived(None, digit[:1], time.time()))
            else:
                stream.ignore("dtmf_type", call, "dtmf whose digit is not a string")
        case "connected" | "start":
            pass
        case other:
            stream.ignore("unknown_event", call, f"unknown event {other[:40]!r}")


def _media(stream: _Stream, payload: str, attachment: TwilioAttachment) -> None:
    try:
        audio = c.decode_base64_audio(payload)
    except InvalidRequest:
        stream.ignore("bad_base64", attachment.call_sid, "media with bad base64")
        return
    attachment.submit(c.AppendAudio(None, audio))
