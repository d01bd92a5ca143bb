"""``/v1/realtime/calls``: OpenAI's WebRTC flow (the ``webrtc`` extra).

``POST /v1/realtime/calls`` takes an SDP offer, as ``application/sdp`` or as
``multipart/form-data`` with an ``sdp`` part and an optional ``session`` part (a
session object, applied as a ``session.update`` would be), under the same key and
origin rules as ``/v1/realtime``. It answers ``201`` with the SDP answer
(``application/sdp``) and ``Location: /v1/realtime/calls/{call_id}``; the call's
``oai-events`` data channel then speaks the Realtime GA dialect
(``gateway.transports.webrtc_attachment``) and the audio goes both ways as Opus.
``DELETE /v1/realtime/calls/{call_id}`` (or OpenAI's ``POST .../hangup``) hangs up:
the session ends; a process that does not hold the call passes the hang-up to the
one that does. A refusal is an OpenAI-shaped ``{"error": {...}}`` with a 4xx or
5xx, before any session or peer connection exists. ``?resumable=0`` makes a
dropped peer end the session instead of detaching it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from duplex import commands as c
from duplex import wire
from duplex.config import SessionConfig, apply_update
from duplex.errors import CapacityError, DuplexError, InvalidRequest
from gateway.auth import AccessPolicy
from gateway.log_limits import LogLimiter
from gateway.owner_relay import RELAYED_BY_HEADER, relay_tls
from gateway.transports.realtime_codec import RealtimeCodec
from gateway.transports.sdp_offer import check_offer

if TYPE_CHECKING:
    from gateway.gateway import Gateway
    from gateway.webrtc_call import Calls

log = logging.getLogger(__name__)
_refusals = LogLimiter(log)

SESSION_PART_BYTES = 1024 * 1024  # the multipart ``session`` object: instructions, tools
CALL_PREFIX, SESSION_PREFIX = "rtc_", "sess_"
RELAY_TIMEOUT_S = 15.0


def call_id_of(session_id: str) -> str:
    """A call's id: ``rtc_`` and its session id's tail, so that any process can tell
    whose call an id names (the hang-up relay below)."""
    return CALL_PREFIX + session_id.removeprefix(SESSION_PREFIX)


def _error(status: int, error: DuplexError) -> JSONResponse:
    return JSONResponse({"error": error.to_wire()}, status_code=status)


def calls_of(request: Request) -> Calls | None:
    """The process's calls, or None without the ``webrtc`` extra."""
    calls: Calls | None = request.app.state.calls
    return calls


async def create_call(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    access: AccessPolicy = request.app.state.access
    refusal = access.socket_refusal(request.headers, (), request.query_params)
    if refusal is not None:
        _refusals.warning(refusal.code, "refused a WebRTC call: %s", refusal.message)
        return _error(401 if refusal.code == "invalid_api_key" else 403, refusal)
    calls = calls_of(request)
    if calls is None:
        return _error(501, DuplexError("WebRTC needs the gateway's webrtc extra: pip install "
                                       "'duplex-gateway[webrtc]'", code="webrtc_unavailable"))
    why = await gateway.readiness(fresh=False)
    if why:
        return _error(503, DuplexError(f"the gateway is not ready: {why}", code="not_ready"))
    try:
        sdp, update = await _read_offer(request, gateway.config.webrtc_max_offer_bytes,
                                        gateway.config.max_message_bytes)
    except InvalidRequest as exc:
        _refusals.warning(exc.code, "refused a WebRTC offer: %s", exc.message)
        return _error(400, exc)
    call = calls.new()
    try:
        answer = await call.answer(sdp)
        runner, token = await gateway.open_session(
            beta=False, address=request.client.host if request.client else None)
    except DuplexError as exc:
        await call.pc.close()
        if isinstance(exc, CapacityError):
            gateway.metrics.sessions_rejected.labels(exc.code).inc()
        status = 400 if isinstance(exc, InvalidRequest) else 429 if isinstance(
            exc, CapacityError) else 500
        return _error(status, exc)
    resumable = request.query_params.get("resumable", "1").lower() not in ("0", "false", "no")
    codec = RealtimeCodec(gateway.config.max_message_bytes, resumable=resumable)
    calls.start(call, call_id_of(runner.session_id), gateway, runner, token, codec, update)
    log.info("call %s: session %s, answered", call.call_id, runner.session_id)
    return Response(answer, status_code=201, media_type="application/sdp",
                    headers={"Location": f"/v1/realtime/calls/{call.call_id}"})


async def _read_offer(request: Request, max_sdp: int,
                      max_message: int) -> tuple[str, c.UpdateSession | None]:
    """The offer's SDP, checked, and its ``session`` as a ``session.update``."""
    limit = max_sdp + SESSION_PART_BYTES + 4096  # multipart's own boundaries and headers
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise InvalidRequest("a WebRTC offer needs a Content-Length", code="invalid_sdp")
    if int(length) > limit:
        raise InvalidRequest(f"the offer's body has {length} bytes, over the {limit}-byte "
                             "limit", code="sdp_too_large")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    sdp: str | None
    session: str | None = None
    if kind == "application/sdp":
        sdp = (await request.body()).decode("utf-8", "replace")
    elif kind == "multipart/form-data":
        form = await request.form(max_files=2, max_fields=4, max_part_size=limit)
        sdp, session = await _text(form.get("sdp")), await _text(form.get("session"))
        if sdp is None:
            raise InvalidRequest("the multipart offer has no sdp part", code="invalid_sdp",
                                 param="sdp")
    else:
        raise InvalidRequest("a WebRTC offer is application/sdp, or multipart/form-data "
                             "with sdp and session parts", code="invalid_sdp")
    checked = check_offer(sdp, max_bytes=max_sdp)
    return checked, None if session is None else _session_update(session, max_message)


async def _text(part: UploadFile | str | None) -> str | None:
    """A form part's text, whether it came as a field or as a file (a ``Blob``)."""
    if isinstance(part, UploadFile):
        return (await part.read()).decode("utf-8", "replace")
    return part


def _session_update(part: str, max_bytes: int) -> c.UpdateSession:
    try:
        session = json.loads(part)
    except ValueError:
        raise InvalidRequest("the session part is not JSON", code="invalid_session",
                             param="session") from None
    if not isinstance(session, dict):
        raise InvalidRequest("the session part must be a JSON object", code="invalid_session",
                             param="session")
    cmd = wire.decode_command(json.dumps({"type": "session.update", "session": session}),
                              max_bytes=max_bytes)
    assert isinstance(cmd, c.UpdateSession)
    apply_update(SessionConfig(), cmd.session)  # a bad field is refused now, with a 400
    return cmd


async def hang_up(request: Request) -> Response:
    access: AccessPolicy = request.app.state.access
    refusal = access.socket_refusal(request.headers, (), request.query_params)
    if refusal is not None:
        return _error(401 if refusal.code == "invalid_api_key" else 403, refusal)
    calls = calls_of(request)
    call_id = request.path_params["call_id"]
    if calls is not None and await calls.hang_up(call_id):
        return Response(status_code=204)
    if await _hung_up_by_owner(request, call_id):
        return Response(status_code=204)
    return _error(404, InvalidRequest(f"no call {call_id[:80]!r} on this gateway",
                                      code="call_not_found", param="call_id"))


async def _hung_up_by_owner(request: Request, call_id: str) -> bool:
    """Under ``--workers`` (or behind a load balancer) a hang-up can reach a process
    that does not hold the call: the call's session names its owner, whose advertised
    address takes the ``DELETE`` (once: a relayed one is never relayed again)."""
    gateway: Gateway = request.app.state.gateway
    if RELAYED_BY_HEADER in request.headers or not call_id.startswith(CALL_PREFIX):
        return False
    owner = await gateway.owner_elsewhere(SESSION_PREFIX + call_id.removeprefix(CALL_PREFIX))
    if owner is None:
        return False
    url = re.sub(r"^ws", "http", owner.rstrip("/")) + f"/v1/realtime/calls/{call_id}"
    headers = {RELAYED_BY_HEADER: gateway.owner}
    if gateway.config.api_key is not None:
        headers["Authorization"] = f"Bearer {gateway.config.api_key}"
    tls = relay_tls(gateway.config) if url.startswith("https:") else None
    return await asyncio.to_thread(_delete, url, headers, tls) == 204


def _delete(url: str, headers: dict[str, str], tls: ssl.SSLContext | None) -> int:
    """One ``DELETE``'s status (0: the owner could not be reached)."""
    request = urllib.request.Request(url, method="DELETE", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=RELAY_TIMEOUT_S, context=tls) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:  # URLError is one: the owner went, or cannot be reached
        log.info("the hang-up of a call could not reach its owner: %s", exc)
        return 0


def webrtc_routes() -> list[Route]:
    return [
        Route("/v1/realtime/calls", create_call, methods=["POST"]),
        Route("/v1/realtime/calls/{call_id}", hang_up, methods=["DELETE"]),
        Route("/v1/realtime/calls/{call_id}/hangup", hang_up, methods=["POST"]),
    ]


def load_calls() -> Calls | None:
    """The calls registry, or None when aiortc (the ``webrtc`` extra) is not installed."""
    try:
        from gateway.webrtc_call import Calls
    except ImportError as exc:
        log.info("WebRTC (/v1/realtime/calls) is off: %s (pip install "
                 "'duplex-gateway[webrtc]')", exc)
        return None
    return Calls()
