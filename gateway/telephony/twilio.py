"""Twilio: its webhook, its signatures, and its codec on the carrier-neutral bridge.

``POST /v1/twilio/voice`` answers a call with TwiML that connects it to
``/v1/twilio/media-stream`` (bidirectional ``<Connect><Stream>``), passing a
stream token (and the session's instructions) as ``<Parameter>``s. The stream is
Twilio's codec (``telephony.twilio_codec``) on the bridge (``telephony.call_stream``).
Pacing is the runner's ``--output-lead-ms``: Twilio plays what it buffers in
order, so a bounded lead is all it needs.

``X-Twilio-Signature`` is base64(HMAC-SHA1(auth token, URL + each POST param's
name and value, sorted by name)). The WebSocket upgrade is signed over the
``wss://`` URL exactly as written in the TwiML, with no params
(research/peers.md §3.2).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Iterable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from duplex.errors import DuplexError
from gateway.auth import AccessPolicy
from gateway.config import GatewayConfig
from gateway.telephony.answer import off_routes, request_url, xml_attr
from gateway.telephony.bridge import TOKEN_TTL_S, CallBridge
from gateway.telephony.call_stream import stream_endpoint
from gateway.telephony.tokens import mint_stream_token
from gateway.telephony.twilio_codec import TwilioCodec

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/twilio/voice"
STREAM_PATH = "/v1/twilio/media-stream"


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    payload = url + "".join(k + v for k, v in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signature_ok(auth_token: str, url: str, params: Iterable[tuple[str, str]],
                 offered: str | None) -> bool:
    if not offered:
        return False
    return hmac.compare_digest(twilio_signature(auth_token, url, params).encode(),
                               offered.encode())


class Twilio:
    """Twilio Media Streams as a carrier of the bridge (``telephony.bridge.Carrier``)."""

    name = "twilio"
    stream_path = STREAM_PATH
    stream_tokens = True

    def __init__(self, config: GatewayConfig) -> None:
        # the auth token also keys the stream tokens, so every gateway behind the
        # same number accepts the others' TwiML
        self.auth_token = self.secret_seed = config.twilio_auth_token

    def codec(self, max_bytes: int) -> TwilioCodec:
        return TwilioCodec(max_bytes)

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        if self.auth_token is None or signature_ok(self.auth_token, stream_url, (),
                                                   ws.headers.get("x-twilio-signature")):
            return None
        return f"bad or missing X-Twilio-Signature for {stream_url}"


def twilio_routes(access: AccessPolicy, config: GatewayConfig) -> list[BaseRoute]:
    """The webhook and the media stream; with ``access.twilio_off``, routes that
    refuse everything (nothing could tell Twilio from anyone else)."""
    if access.twilio_off:
        return off_routes("Twilio", VOICE_PATH, STREAM_PATH)
    bridge = CallBridge(config, Twilio(config))

    async def voice_webhook(request: Request) -> Response:
        return await _voice_webhook(request, bridge)

    return [Route(VOICE_PATH, voice_webhook, methods=["POST"]),
            WebSocketRoute(STREAM_PATH, stream_endpoint(bridge))]



async def _voice_webhook(request: Request, bridge: CallBridge) -> Response:
    """``POST /v1/twilio/voice``: TwiML connecting the call to our media stream."""
    form = await request.form()
    params = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    auth = bridge.config.twilio_auth_token
    if auth is not None:
        url = request_url(bridge, request)
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
             f"<Stream url={xml_attr(stream_url)}>"
             f"<Parameter name=\"token\" value={xml_attr(token)}/>"
             + (f"<Parameter name=\"instructions\" value={xml_attr(instructions)}/>"
                if instructions else "")
             + "</Stream></Connect></Response>")
    return Response(twiml, media_type="application/xml")
