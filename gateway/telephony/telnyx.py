"""Telnyx: its TeXML webhook, its Ed25519 signatures, its codec on the bridge.

``POST /v1/telnyx/voice`` (the TeXML application's voice URL) answers a call
with TeXML that starts a bidirectional stream (``<Start><Stream
bidirectionalMode="rtp">``, then a ``<Pause>`` as long as a session may live, so
the call stays up while the stream serves it) to ``/v1/telnyx/media-stream``,
passing the call, a stream token and the session's instructions as
``<Parameter>``s, which Telnyx hands back in the stream's ``start``. The stream
is Telnyx's codec (``telephony.telnyx_codec``) on the bridge
(``telephony.call_stream``).

Telnyx signs each webhook with Ed25519: ``telnyx-signature-ed25519`` is the
base64 signature of ``<telnyx-timestamp>|<raw body>`` under the account's
public key (Mission Control → Keys & Credentials → Public Key), and the
timestamp must be within ``TOLERANCE_S`` of now (a replay is refused). The
stream's upgrade carries no signature of Telnyx's: the per-call stream token is
its proof. The routes are off unless ``--telnyx-public-key`` is set.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import parse_qsl

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from gateway.config import GatewayConfig
from gateway.telephony.answer import off_routes, stream_token, text, xml_attr
from gateway.telephony.bridge import CallBridge
from gateway.telephony.call_stream import stream_endpoint
from gateway.telephony.telnyx_codec import TelnyxCodec
from gateway.telephony.telnyx_signature import public_key, signature_ok

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/telnyx/voice"
STREAM_PATH = "/v1/telnyx/media-stream"
CODECS = {"PCMU": 8000, "PCMA": 8000, "L16": 16000}  # --telnyx-codec → its rate


class Telnyx:
    """Telnyx media streaming as a carrier of the bridge (``telephony.bridge.Carrier``)."""

    name = "telnyx"
    stream_path = STREAM_PATH
    stream_tokens = True  # our webhook mints one per call
    # the credential is a public key, which must not key the stream tokens: the key
    # is a random one shared in Redis by every gateway on it
    secret_seed: str | None = None

    def codec(self, max_bytes: int) -> TelnyxCodec:
        return TelnyxCodec(max_bytes)

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        return None  # Telnyx does not sign the upgrade: the stream token is the proof


def telnyx_off(config: GatewayConfig) -> str | None:
    """Why the Telnyx routes are off, or None when they are on."""
    if config.telnyx_public_key is None:
        return ("--telnyx-public-key is not set, so nothing would authenticate Telnyx's "
                "webhooks; set it (DUPLEX_GATEWAY_TELNYX_PUBLIC_KEY) to turn them on")
    return None


def telnyx_routes(config: GatewayConfig) -> list[BaseRoute]:
    """The webhook and the media stream; off (refusing everything) without a key."""
    if config.telnyx_public_key is None:
        return off_routes("Telnyx", VOICE_PATH, STREAM_PATH)
    bridge = CallBridge(config, Telnyx())
    key = public_key(config.telnyx_public_key)

    async def voice_webhook(request: Request) -> Response:
        return await _voice_webhook(request, bridge, key)

    return [Route(VOICE_PATH, voice_webhook, methods=["POST"]),
            WebSocketRoute(STREAM_PATH, stream_endpoint(bridge))]


def _fields(body: bytes, content_type: str) -> dict[str, Any]:
    """TeXML's request fields: a form (as TeXML posts), or a JSON object."""
    if content_type.startswith("application/json"):
        try:
            parsed = json.loads(body)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


async def _voice_webhook(request: Request, bridge: CallBridge,
                         key: Ed25519PublicKey) -> Response:
    """``POST /v1/telnyx/voice``: TeXML starting our bidirectional media stream."""
    body = await request.body()
    if not signature_ok(key, body, request.headers.get("telnyx-timestamp"),
                        request.headers.get("telnyx-signature-ed25519"), time.time()):
        log.warning("telnyx webhook refused: bad, stale or missing telnyx-signature-ed25519")
        return text("invalid signature", 403)
    call_id = _fields(body, request.headers.get("content-type", "")).get("CallSid")
    if not isinstance(call_id, str) or not call_id:
        return text("CallSid is required", 400)
    config = bridge.config
    instructions = request.query_params.get("instructions", config.telnyx_instructions or "")
    token = await stream_token(bridge, call_id, instructions)
    if isinstance(token, Response):
        return token
    codec = config.telnyx_codec.upper()
    rate = str(CODECS[codec])
    stream_url = bridge.stream_url(request.url.scheme, request.url.netloc)
    params = {"call": call_id, "token": token, **({"instructions": instructions}
                                                   if instructions else {})}
    texml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Start>"
             f"<Stream url={xml_attr(stream_url)} track=\"inbound_track\" codec=\"{codec}\" "
             f"bidirectionalMode=\"rtp\" bidirectionalCodec=\"{codec}\" "
             f"bidirectionalSamplingRate=\"{rate}\">"
             + "".join(f"<Parameter name={xml_attr(k)} value={xml_attr(v)}/>"
                       for k, v in params.items())
             + f"</Stream></Start><Pause length=\"{_call_length_s(config)}\"/></Response>")
    return Response(texml, media_type="application/xml")


def _call_length_s(config: GatewayConfig) -> int:
    """How long the call waits on its stream: as long as its session may live."""
    return int(config.max_session_s + config.disconnect_grace_s) if config.max_session_s \
        else 24 * 3600
