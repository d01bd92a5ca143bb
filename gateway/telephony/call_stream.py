"""A carrier's media stream, carrier-neutral: handshake, call binding, relay, loop.

The stream is accepted only with the carrier's proof on the upgrade (or another
gateway's relay proof), then read up to the carrier's start, whose stream token
must be the one our webhook minted for that call (where the carrier's calls are
answered by a webhook of ours: ``Carrier.stream_tokens``). A call's first stream opens a
session and binds the call to it in Redis; a second stream of the call resumes
that session here (the first socket is closed), or is relayed to the process that
owns it. Then the shared loop serves the stream: the carrier's ``stop`` ends the
session and forgets the call; a dropped socket detaches it, resumable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket

from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.errors import CapacityError, DuplexError
from gateway import sockets
from gateway.auth import AccessPolicy
from gateway.log_limits import LogLimiter
from gateway.owner_relay import RELAYED_BY_HEADER, served_by_owner
from gateway.telephony.bridge import CallBridge
from gateway.telephony.calls import Binding
from gateway.telephony.tokens import relay_proof, relay_proof_ok, stream_token_ok
from gateway.transports.attachment import SocketAttachment
from gateway.transports.codec import Codec, Frame, Hello, Ignore, Refuse, StreamStart
from gateway.transports.frames import SocketFrames
from gateway.transports.loop import serve

if TYPE_CHECKING:
    from gateway.gateway import Gateway

log = logging.getLogger(__name__)

RELAY_PROOF_HEADER = "x-duplex-relay-proof"
START_TIMEOUT_S = 10.0
TOUCH_EVERY_S = 30.0  # the call's binding lives as long as the call is served


def stream_endpoint(bridge: CallBridge) -> sockets.Endpoint:
    """The media stream endpoint of ``bridge``'s carrier."""

    @sockets.total
    async def media_stream_endpoint(ws: WebSocket) -> None:
        await _accept(ws, bridge)

    return media_stream_endpoint


@dataclass(frozen=True, slots=True)
class _Stream:
    """One media stream socket, up to its session."""

    frames: SocketFrames
    codec: Codec
    bridge: CallBridge
    gateway: Gateway
    warnings: LogLimiter  # the carrier's junk, this socket's: one line a while

    @property
    def name(self) -> str:
        return self.bridge.carrier.name

    async def refuse(self, code: CloseCode, reason: str, why: str) -> None:
        log.warning("%s media stream refused: %s", self.name, why)
        await self.frames.close(code, reason)


async def _accept(ws: WebSocket, bridge: CallBridge) -> None:
    gateway: Gateway = ws.app.state.gateway
    access: AccessPolicy = ws.app.state.access
    await ws.accept()
    stream = _Stream(SocketFrames(ws), bridge.carrier.codec(gateway.config.max_message_bytes),
                     bridge, gateway, LogLimiter(log))
    refusal = access.origin_refusal(ws.headers)
    if refusal is not None:  # a browser page; carriers send no Origin
        await stream.refuse(CloseCode.POLICY, refusal.code, refusal.message)
        return
    try:
        secret = await bridge.secret()
    except DuplexError as exc:
        await stream.refuse(CloseCode.INTERNAL_ERROR, exc.code, exc.message)
        return
    url = bridge.stream_url("wss" if ws.url.scheme == "wss" else "ws", ws.url.netloc)
    why = bridge.carrier.upgrade_refusal(ws, url)
    if why is not None and not relay_proof_ok(secret, ws.headers.get(RELAYED_BY_HEADER),
                                              ws.headers.get(RELAY_PROOF_HEADER)):
        await stream.refuse(CloseCode.POLICY, "invalid signature", why)
        return
    try:
        await _serve(stream, secret)
    finally:
        stream.warnings.flush()


async def _serve(stream: _Stream, secret: bytes) -> None:
    started = await _await_start(stream, secret)
    if started is None:
        return
    start, first = started
    why = await stream.gateway.readiness(fresh=False)
    if why:
        await stream.refuse(CloseCode.TRY_AGAIN_LATER, "not ready",
                            f"the gateway is not ready: {why}")
        return
    attachment = await _bind(stream, start, first)
    if attachment is None:
        return  # refused, or served through the session's owner
    registry = stream.bridge.registry
    async with asyncio.TaskGroup() as tg:
        keeper = tg.create_task(_keep_binding(stream.bridge, start.call_id))
        await serve(attachment, on_hangup=lambda: registry.drop(start.call_id))
        keeper.cancel()


async def _keep_binding(bridge: CallBridge, call_id: str) -> None:
    while True:
        await asyncio.sleep(TOUCH_EVERY_S)
        await bridge.registry.touch(call_id)


async def _await_start(stream: _Stream, secret: bytes) -> tuple[StreamStart, list[Frame]] | None:
    """Read up to the start and check it (format, token); None when refused. Also
    returns the greeting and the start as sent (a relay passes them on)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    read: list[Frame] = []
    while True:
        try:
            frame = await asyncio.wait_for(stream.frames.receive(),
                                           max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            await stream.frames.close(CloseCode.POLICY, "no start message")
            return None
        if frame is None:
            return None
        match stream.codec.parse(frame):
            case Hello() if not read:
                read.append(frame)  # kept for a relay (junk is not: bounded, I8)
            case Ignore(kind, why) if why:
                stream.warnings.warning(kind, "call (before start): ignored %s", why)
            case Refuse(why):
                await stream.refuse(CloseCode.POLICY, why, why)
                return None
            case StreamStart() as start:
                read.append(frame)
                refusal = (_token_refusal(start, secret) if stream.bridge.carrier.stream_tokens
                           else None)
                if refusal is None:
                    return start, read
                await stream.refuse(CloseCode.POLICY, refusal, refusal)
                return None


def _token_refusal(start: StreamStart, secret: bytes) -> str | None:
    instructions = start.parameters.get("instructions") or ""
    if not isinstance(instructions, str) or not stream_token_ok(
            secret, start.parameters.get("token"), start.call_id, instructions, time.time()):
        return f"call {start.call_id[:40]}: bad or expired stream token"
    return None


async def _bind(stream: _Stream, start: StreamStart,
                first: list[Frame]) -> SocketAttachment | None:
    """Resume the call's session if it has one, else open one; attach this socket.
    None when refused, or once served through the session's owner elsewhere."""
    registry = stream.bridge.registry
    try:
        binding = await registry.get(start.call_id)
        if binding is None:
            opened = await _open(stream, start)
            if opened is not None:
                return opened
            # another stream of this call bound its session first (on any process)
            binding = await registry.get(start.call_id)
            if binding is None:
                return None
        if await _relayed_to_owner(stream, binding.session_id, first):
            return None
        attachment = await _resume(stream, start, binding)
        if attachment is not None:
            return attachment
        return await _open(stream, start)
    except DuplexError as exc:
        log.warning("call %s: no session: %s", start.call_id, exc.message)
        await stream.frames.close(CloseCode.TRY_AGAIN_LATER if isinstance(exc, CapacityError)
                                  else CloseCode.INTERNAL_ERROR, exc.code)
        return None


async def _relayed_to_owner(stream: _Stream, sid: str, first: list[Frame]) -> bool:
    """A second stream of a call whose session lives on another process: relay it
    there (``gateway.owner_relay``) rather than fork or take the call over."""
    gateway, bridge = stream.gateway, stream.bridge
    headers = {RELAY_PROOF_HEADER: relay_proof(await bridge.secret(), gateway.owner)}
    return await served_by_owner(stream.frames, gateway, sid, bridge.carrier.stream_path,
                                 headers, first)


async def _open(stream: _Stream, start: StreamStart) -> SocketAttachment | None:
    """A new session for the call; None when another stream of it bound one first."""
    runner, token = await stream.gateway.open_session(beta=False)
    if not await stream.bridge.registry.put(start.call_id, Binding(runner.session_id, token),
                                            only_new=True):
        # another socket of this call bound a session first: the caller joins it
        runner.request_close("duplicate_call")
        return None
    attachment = SocketAttachment(stream.frames, stream.codec, runner, 1, extensions=True,
                                  name=f"call {start.call_id}", warnings=stream.warnings)
    await runner.attach(attachment, resume_token=token, cursor=None)
    update: dict[str, Any] = {"audio": {"input": {"format": {"type": start.audio_format}},
                                        "output": {"format": {"type": start.audio_format}}}}
    instructions = start.parameters.get("instructions")
    if instructions:
        update["instructions"] = instructions
    attachment.submit(c.UpdateSession(None, update))
    log.info("call %s: session %s (stream %s)", start.call_id, runner.session_id,
             start.stream_id)
    return attachment


async def _resume(stream: _Stream, start: StreamStart,
                  binding: Binding) -> SocketAttachment | None:
    """A second socket for a call takes its session over (the first one is closed)."""
    gateway, registry, sid = stream.gateway, stream.bridge.registry, binding.session_id
    try:
        _, last = await gateway.store.journal_bounds(sid)
        runner, token, generation = await gateway.resume_session(
            sid, binding.resume_token, last, beta=False)
    except DuplexError as exc:
        log.info("call %s: session %s not resumable (%s); opening a new one",
                 start.call_id, sid, exc.code)
        await registry.drop(start.call_id)
        return None
    await registry.put(start.call_id, Binding(sid, token), only_new=False)
    attachment = SocketAttachment(stream.frames, stream.codec, runner, generation,
                                  extensions=True, name=f"call {start.call_id}",
                                  warnings=stream.warnings)
    await runner.attach(attachment, resume_token=token, cursor=last)
    runner.confirm_token(generation)  # the stream token already proved who we are
    log.info("call %s: stream %s took session %s over", start.call_id, start.stream_id, sid)
    return attachment
