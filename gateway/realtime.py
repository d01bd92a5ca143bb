"""``/v1/realtime``: the OpenAI Realtime WebSocket protocol adapter.

The reader turns wire messages into core commands and queues them on the
session's mailbox; the session's worker is the only writer of server events.
Errors are split by cause in ``duplex.errors`` and become ``error`` events
here, at the boundary; one bad message never ends the connection.

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

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex import commands as c
from duplex import wire
from duplex.attach import GAP_CLOSE_REASON, resync_required
from duplex.close_codes import CloseCode, close_reason
from duplex.errors import CapacityError, DuplexError, InvalidRequest, SessionStateError
from gateway import owner_relay, sockets, ws_reads
from gateway.auth import RESUME_REFUSAL_CODES, AccessPolicy, resume_refused
from gateway.gateway import ResyncRequired
from gateway.log_limits import LogLimiter
from gateway.outbound import Outbound
from gateway.session.attachment import unjournaled_error
from gateway.ws_reads import delivering, direct_reads

if TYPE_CHECKING:
    from gateway.gateway import Gateway
    from gateway.session.runner import SessionRunner

log = logging.getLogger(__name__)
_refusals = LogLimiter(log)  # process-wide: a flood of bad keys is one line per window

BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
FIRST_MESSAGE_TIMEOUT_S = 10.0


class WsAttachment:
    """One socket serving one attachment generation of a session."""

    def __init__(self, ws: WebSocket, generation: int, *, resumed: bool = False) -> None:
        self.ws = ws
        # The duplex extension events a client did not ask for (``session.expired``)
        # go only to a client that opted in: ``?extensions=duplex``, or a resume
        # (itself an extension). A plain OpenAI client would reject them.
        self.extensions = resumed or "duplex" in ws.query_params.get("extensions", "").split(",")
        self.direct = direct_reads(ws)  # sends straight to uvicorn's protocol when it can
        self.generation = generation
        self.ended = asyncio.Event()
        self.close_code, self.close_reason, self.linger_s = int(CloseCode.NORMAL), "", 0.0
        # a resumed socket proves it holds the rotated token by speaking
        self.unconfirmed = resumed

    async def send(self, out: Outbound) -> None:
        await ws_reads.send_text(self.ws, self.direct, out.text)

    async def end(self, code: int, reason: str, *, linger_s: float = 0.0) -> None:
        """Stop serving this socket. With ``linger_s`` the socket stays open that long
        (or until the client closes it) so late commands still get an answer."""
        if self.ended.is_set():
            return
        self.close_code, self.close_reason, self.linger_s = code, close_reason(reason), linger_s
        self.ended.set()
        if not linger_s:
            await self.close()

    async def close(self) -> None:
        await sockets.close(self.ws, self.close_code, self.close_reason)


async def _refuse(ws: WebSocket, error: DuplexError, close_code: CloseCode) -> None:
    await _send_and_close(ws, unjournaled_error(error), close_code, error.message)


async def _send_and_close(ws: WebSocket, message: dict[str, object], close_code: CloseCode,
                          reason: str = "") -> None:
    try:
        await ws.send_text(json.dumps(message))
    except (RuntimeError, WebSocketDisconnect):
        return  # the peer is already gone
    await sockets.close(ws, close_code, reason)


@sockets.total
async def realtime_endpoint(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    access: AccessPolicy = ws.app.state.access
    protocols = list(ws.scope.get("subprotocols") or [])
    # Browsers fail the handshake unless we pick "realtime" when they offer it.
    await ws.accept(subprotocol="realtime" if "realtime" in protocols else None)
    refusal = access.socket_refusal(ws.headers, protocols, ws.query_params)
    if refusal is not None:  # before any session exists
        _refusals.warning(refusal.code, "refused a realtime socket: %s", refusal.message)
        await _refuse(ws, refusal, CloseCode.POLICY)
        return
    why = await gateway.readiness(fresh=False)
    if why:
        await _refuse(ws, DuplexError(f"the gateway is not ready: {why}",
                                      code="not_ready"), CloseCode.TRY_AGAIN_LATER)
        return
    beta = ("realtime=v1" in ws.headers.get("openai-beta", "")
            or BETA_SUBPROTOCOL in protocols)
    resume_id = ws.query_params.get("resume")
    attached = (await _resume(ws, gateway, resume_id, beta) if resume_id
                else await _open(ws, gateway, beta))
    if attached is None:
        return
    runner, attachment = attached
    resumable = ws.query_params.get("resumable", "1").lower() not in ("0", "false", "no")
    async with asyncio.TaskGroup() as tg:
        reader = tg.create_task(_read(ws, runner, attachment, resumable,
                                      gateway.config.max_message_bytes))
        await attachment.ended.wait()
        if attachment.linger_s:
            # the session ended: answer stragglers until the client hangs up
            await asyncio.wait([reader], timeout=attachment.linger_s)
            reader.cancel()
            await attachment.close()
        reader.cancel()


async def _open(ws: WebSocket, gateway: Gateway,
                beta: bool) -> tuple[SessionRunner, WsAttachment] | None:
    try:
        runner, token = await gateway.open_session(
            beta=beta, address=ws.client.host if ws.client else None,
            transcription=ws.query_params.get("intent") == "transcription")
    except CapacityError as exc:
        gateway.metrics.sessions_rejected.labels(exc.code).inc()
        await _refuse(ws, exc, CloseCode.TRY_AGAIN_LATER)
        return None
    except DuplexError as exc:
        await _refuse(ws, exc, CloseCode.INTERNAL_ERROR)
        return None
    attachment = WsAttachment(ws, generation=1)
    await runner.attach(attachment, resume_token=token, cursor=None)
    return runner, attachment


async def _first_command(ws: WebSocket, max_bytes: int) -> tuple[c.Command, str] | None:
    """The first message, parsed and as sent; None when the client went first."""
    try:
        msg = await asyncio.wait_for(ws.receive(), FIRST_MESSAGE_TIMEOUT_S)
    except TimeoutError:
        raise InvalidRequest("session.resume must arrive within "
                             f"{FIRST_MESSAGE_TIMEOUT_S:.0f} s", code="config_timeout") from None
    if msg["type"] == "websocket.disconnect":
        return None
    text = msg.get("text")
    if text is None:
        raise InvalidRequest("the first message of a resume must be session.resume",
                             code="invalid_session_resume")
    return wire.decode_command(text, max_bytes=max_bytes), text


async def _resume(ws: WebSocket, gateway: Gateway, sid: str,
                  beta: bool) -> tuple[SessionRunner, WsAttachment] | None:
    try:
        first = await _first_command(ws, gateway.config.max_message_bytes)
        if first is None:
            return None
        cmd, text = first
        if not isinstance(cmd, c.ResumeSession):
            raise InvalidRequest("the first message of a resume must be session.resume",
                                 code="invalid_session_resume")
        if cmd.session_id not in (None, sid):
            raise InvalidRequest("session.resume names another session than ?resume=",
                                 code="invalid_session_resume", param="session_id")
        if await _relayed_to_owner(ws, gateway, sid, text, beta):
            return None
        cursor = cmd.last_received_server_event_seq
        runner, token, generation = await gateway.resume_session(
            sid, cmd.resume_token, cursor, beta=beta)
        attachment = WsAttachment(ws, generation, resumed=True)
        attached = await runner.attach(attachment, resume_token=token, cursor=cursor)
    except ResyncRequired as exc:  # the one rule for a gap: duplex.attach
        await _send_and_close(ws, resync_required(exc.oldest, exc.last), CloseCode.NORMAL,
                              GAP_CLOSE_REASON)
        return None
    except DuplexError as exc:
        # one answer to an unknown session and a wrong token: no telling which ids exist
        refusal = resume_refused() if exc.code in RESUME_REFUSAL_CODES else exc
        gateway.metrics.errors.labels(refusal.code).inc()
        await _refuse(ws, refusal, CloseCode.POLICY if isinstance(
            refusal, InvalidRequest | SessionStateError) else CloseCode.INTERNAL_ERROR)
        return None
    if not attached:
        return None  # refused after the swap (session.resync_required): nothing to read
    gateway.metrics.resumes.inc()
    if attachment.ended.is_set():
        return None  # the socket went while it was replayed: the session detached again
    return runner, attachment


async def _relayed_to_owner(ws: WebSocket, gateway: Gateway, sid: str, first: str,
                            beta: bool) -> bool:
    """Serve the resume through the session's live owner on another process, if it
    has one this process can reach (``gateway.owner_relay``); True once done."""
    query = {"resume": sid}
    for key in ("resumable", "extensions"):
        if key in ws.query_params:
            query[key] = ws.query_params[key]
    headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
    if gateway.config.api_key is not None:
        headers["Authorization"] = f"Bearer {gateway.config.api_key}"
    return await owner_relay.served_by_owner(ws, gateway, sid, f"/v1/realtime?{urlencode(query)}",
                                             headers, [first])


async def _read(ws: WebSocket, runner: SessionRunner, attachment: WsAttachment,
                resumable: bool, max_bytes: int) -> None:
    code = int(CloseCode.ABNORMAL)
    limiter = LogLimiter(log)  # this socket's warnings: a flood is one line

    def deliver(text: str | None, data: bytes | None) -> bool:
        """A message straight from the socket's parser: taken unless this loop
        would have to wait or stop for it (a late command, a replaced socket)."""
        if runner.closed.is_set() or not runner.serves(attachment):
            return False
        _take_now(runner, attachment, text, data, max_bytes, limiter)
        return True

    with delivering(ws, deliver) as direct:
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    code = int(msg.get("code") or CloseCode.ABNORMAL)
                    break
                if not runner.serves(attachment):
                    return  # replaced or ended: this socket's input no longer counts (R18)
                await _take(runner, attachment, msg, max_bytes, limiter)
        except WebSocketDisconnect as exc:
            code = exc.code
        except RuntimeError:
            pass  # receive after the server closed the socket
        finally:
            limiter.flush()
            if direct is not None:
                log.debug("session %s: %d messages went straight from the socket to the "
                          "session", runner.session_id, direct.delivered)
    if attachment.ended.is_set():
        return
    attachment.ended.set()
    if code == CloseCode.NORMAL or not resumable:
        runner.client_closed("client_close" if code == CloseCode.NORMAL else "disconnect")
    else:
        runner.request_detach(attachment)


async def _take(runner: SessionRunner, attachment: WsAttachment, msg: Message,
                max_bytes: int, limiter: LogLimiter) -> None:
    """One client frame. Total: whatever it holds, the session lives, and the
    client hears at most one ``error`` about it."""
    text, data = msg.get("text"), msg.get("bytes")
    if runner.closed.is_set():
        try:
            await _refuse_late(runner, text, max_bytes)
        except Exception:  # a bug of ours on one message: that message fails, not the session
            limiter.warning("failed", "session %s: a late client message failed",
                            runner.session_id, exc_info=True)
        return
    _take_now(runner, attachment, text, data, max_bytes, limiter)


def _take_now(runner: SessionRunner, attachment: WsAttachment, text: str | None,
              data: bytes | None, max_bytes: int, limiter: LogLimiter) -> None:
    """One frame for an open session, into its mailbox (never waits)."""
    try:
        if attachment.unconfirmed:
            attachment.unconfirmed = False
            runner.confirm_token(attachment.generation)
        _dispatch(runner, text, data, max_bytes, limiter)
    except Exception:  # a bug of ours on one message: that message fails, not the session
        limiter.warning("failed", "session %s: a client message failed", runner.session_id,
                        exc_info=True)
        runner.report(DuplexError("the server failed to handle this message",
                                  code="internal_error"))


def _dispatch(runner: SessionRunner, text: str | None, data: bytes | None, max_bytes: int,
              limiter: LogLimiter) -> None:
    cmd: c.Command | None = None
    try:
        if text is None:
            # Extension: binary frames are raw audio in the session's input format.
            data = data or b""
            if len(data) > max_bytes:
                raise InvalidRequest(f"message of {len(data)} bytes exceeds the "
                                     f"{max_bytes}-byte limit", code="event_too_large")
            cmd = c.AppendAudio(None, data)
        else:
            cmd = wire.decode_command(text, max_bytes=max_bytes)
        runner.submit(cmd)
    except CapacityError:
        # The mailbox is full, so an error event could not be queued either.
        limiter.warning("flooded", "session %s: mailbox full; dropped a client %s",
                        runner.session_id, type(cmd).__name__)
    except DuplexError as exc:
        runner.report(exc)


async def _refuse_late(runner: SessionRunner, text: str | None, max_bytes: int) -> None:
    """A command read after the session ended: refuse it, echoing its event_id. The
    worker is done, so the reader may write now."""
    event_id = None
    if text is not None:
        try:
            event_id = wire.decode_command(text, max_bytes=max_bytes).event_id
        except InvalidRequest as exc:
            event_id = exc.event_id
    await runner.refuse_late(SessionStateError(
        "the session is closed", code="session_closed", event_id=event_id))
