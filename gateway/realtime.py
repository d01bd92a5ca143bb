"""``/v1/realtime``: the OpenAI Realtime WebSocket protocol adapter.

This is the protocol's handshake: the subprotocol and the dialect (beta), the
key, a new session or a resume (relayed to the session's owner when another
process has it). Then the shared loop serves the socket
(``gateway.transports.loop``) with the protocol's codec
(``gateway.transports.realtime_codec``): wire messages become core commands on
the session's inbox; the session's worker is the only writer of server events.
Errors are split by cause in ``duplex.errors`` and become ``error`` events at
that boundary; one bad message never ends the connection.

Connection semantics (the duplex extensions):

- ``/v1/realtime`` opens a new session (``session.created`` carries a
  ``resume_token``); ``?resume=<session_id>`` with ``session.resume`` as the
  first message re-attaches to one.
- A client that closes with code 1000 ends its session (``session.closed``);
  any other drop detaches it for ``disconnect_grace_s``, during which it goes on
  generating and journaling. ``?resumable=0`` makes every drop an end.
- ``?extensions=duplex`` asks for the extension events a client would not
  otherwise ask for (``session.expired``); a resumed socket gets them anyway.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex import commands as c
from duplex.attach import GAP_CLOSE_REASON, resync_required
from duplex.close_codes import CloseCode
from duplex.errors import CapacityError, DuplexError, InvalidRequest, SessionStateError
from gateway import owner_relay, sockets
from gateway.auth import RESUME_REFUSAL_CODES, AccessPolicy, resume_refused
from gateway.gateway import ResyncRequired
from gateway.log_limits import LogLimiter
from gateway.session.attachment import unjournaled_error
from gateway.transports.attachment import SocketAttachment
from gateway.transports.codec import Report
from gateway.transports.frames import Frames, SocketFrames
from gateway.transports.loop import serve
from gateway.transports.realtime_codec import RealtimeCodec

if TYPE_CHECKING:
    from gateway.gateway import Gateway

log = logging.getLogger(__name__)
_refusals = LogLimiter(log)  # process-wide: a flood of bad keys is one line per window

BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
FIRST_MESSAGE_TIMEOUT_S = 10.0


async def _refuse(frames: Frames, error: DuplexError, close_code: CloseCode) -> None:
    await _send_and_close(frames, unjournaled_error(error), close_code, error.message)


async def _send_and_close(frames: Frames, message: dict[str, object], close_code: CloseCode,
                          reason: str = "") -> None:
    try:
        await frames.send(json.dumps(message))
    except (RuntimeError, WebSocketDisconnect):
        return  # the peer is already gone
    await frames.close(close_code, reason)


@sockets.total
async def realtime_endpoint(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    access: AccessPolicy = ws.app.state.access
    protocols = list(ws.scope.get("subprotocols") or [])
    # Browsers fail the handshake unless we pick "realtime" when they offer it.
    await ws.accept(subprotocol="realtime" if "realtime" in protocols else None)
    frames = SocketFrames(ws)
    refusal = access.socket_refusal(ws.headers, protocols, ws.query_params)
    if refusal is not None:  # before any session exists
        _refusals.warning(refusal.code, "refused a realtime socket: %s", refusal.message)
        await _refuse(frames, refusal, CloseCode.POLICY)
        return
    why = await gateway.readiness(fresh=False)
    if why:
        await _refuse(frames, DuplexError(f"the gateway is not ready: {why}",
                                          code="not_ready"), CloseCode.TRY_AGAIN_LATER)
        return
    codec = RealtimeCodec(
        gateway.config.max_message_bytes,
        beta="realtime=v1" in ws.headers.get("openai-beta", "") or BETA_SUBPROTOCOL in protocols,
        resumable=ws.query_params.get("resumable", "1").lower() not in ("0", "false", "no"))
    resume_id = ws.query_params.get("resume")
    attachment = (await _resume(frames, codec, gateway, resume_id) if resume_id
                  else await _open(frames, codec, gateway))
    if attachment is not None:
        await serve(attachment)


def _wants_extensions(ws: WebSocket) -> bool:
    """The duplex extension events a client did not ask for (``session.expired``)
    go only to a client that opted in: ``?extensions=duplex``, or a resume (itself
    an extension). A plain OpenAI client would reject them."""
    return "duplex" in ws.query_params.get("extensions", "").split(",")


async def _open(frames: SocketFrames, codec: RealtimeCodec,
                gateway: Gateway) -> SocketAttachment | None:
    ws = frames.ws
    try:
        runner, token = await gateway.open_session(
            beta=codec.beta, address=ws.client.host if ws.client else None,
            transcription=ws.query_params.get("intent") == "transcription")
    except CapacityError as exc:
        gateway.metrics.sessions_rejected.labels(exc.code).inc()
        await _refuse(frames, exc, CloseCode.TRY_AGAIN_LATER)
        return None
    except DuplexError as exc:
        await _refuse(frames, exc, CloseCode.INTERNAL_ERROR)
        return None
    attachment = SocketAttachment(frames, codec, runner, 1, extensions=_wants_extensions(ws),
                                  name=f"session {runner.session_id}")
    await runner.attach(attachment, resume_token=token, cursor=None)
    return attachment


async def _first_command(frames: Frames,
                         codec: RealtimeCodec) -> tuple[c.ResumeSession, str] | None:
    """The ``session.resume`` a resume starts with, parsed and as sent; None when
    the client went first."""
    try:
        frame = await asyncio.wait_for(frames.receive(), FIRST_MESSAGE_TIMEOUT_S)
    except TimeoutError:
        raise InvalidRequest("session.resume must arrive within "
                             f"{FIRST_MESSAGE_TIMEOUT_S:.0f} s", code="config_timeout") from None
    if frame is None:
        return None
    parsed = codec.parse(frame) if isinstance(frame, str) else None
    if isinstance(parsed, Report):
        raise parsed.error
    if not isinstance(parsed, c.ResumeSession) or not isinstance(frame, str):
        raise InvalidRequest("the first message of a resume must be session.resume",
                             code="invalid_session_resume")
    return parsed, frame


async def _resume(frames: SocketFrames, codec: RealtimeCodec, gateway: Gateway,
                  sid: str) -> SocketAttachment | None:
    try:
        first = await _first_command(frames, codec)
        if first is None:
            return None
        cmd, text = first
        if cmd.session_id not in (None, sid):
            raise InvalidRequest("session.resume names another session than ?resume=",
                                 code="invalid_session_resume", param="session_id")
        if await _relayed_to_owner(frames, gateway, sid, text, codec.beta):
            return None
        cursor = cmd.last_received_server_event_seq
        runner, token, generation = await gateway.resume_session(
            sid, cmd.resume_token, cursor, beta=codec.beta)
        attachment = SocketAttachment(frames, codec, runner, generation, extensions=True,
                                      name=f"session {sid}", unconfirmed=True)
        attached = await runner.attach(attachment, resume_token=token, cursor=cursor)
    except ResyncRequired as exc:  # the one rule for a gap: duplex.attach
        await _send_and_close(frames, resync_required(exc.oldest, exc.last), CloseCode.NORMAL,
                              GAP_CLOSE_REASON)
        return None
    except DuplexError as exc:
        # one answer to an unknown session and a wrong token: no telling which ids exist
        refusal = resume_refused() if exc.code in RESUME_REFUSAL_CODES else exc
        gateway.metrics.errors.labels(refusal.code).inc()
        await _refuse(frames, refusal, CloseCode.POLICY if isinstance(
            refusal, InvalidRequest | SessionStateError) else CloseCode.INTERNAL_ERROR)
        return None
    if not attached:
        return None  # refused after the swap (session.resync_required): nothing to read
    gateway.metrics.resumes.inc()
    if attachment.ended.is_set():
        return None  # the socket went while it was replayed: the session detached again
    return attachment


async def _relayed_to_owner(frames: SocketFrames, gateway: Gateway, sid: str, first: str,
                            beta: bool) -> bool:
    """Serve the resume through the session's live owner on another process, if it
    has one this process can reach (``gateway.owner_relay``); True once done."""
    ws = frames.ws
    query = {"resume": sid}
    for key in ("resumable", "extensions"):
        if key in ws.query_params:
            query[key] = ws.query_params[key]
    headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
    if gateway.config.api_key is not None:
        headers["Authorization"] = f"Bearer {gateway.config.api_key}"
    return await owner_relay.served_by_owner(frames, gateway, sid,
                                             f"/v1/realtime?{urlencode(query)}", headers, [first])
