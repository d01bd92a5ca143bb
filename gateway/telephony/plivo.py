"""Plivo: its answer webhook, its signature V3, its codec on the bridge.

``POST /v1/plivo/answer`` (the application's answer URL) answers a call with
Plivo XML that connects it to ``/v1/plivo/media-stream`` (``<Stream
bidirectional="true" keepCallAlive="true">``, μ-law 8 kHz), passing a stream
token for the call (``CallUUID``, the stream's ``callId``) in ``extraHeaders``.
The stream is Plivo's codec (``telephony.plivo_codec``) on the bridge
(``telephony.call_stream``).

Signature V3, as Plivo's server SDKs compute it: ``X-Plivo-Signature-V3`` is
base64(HMAC-SHA256(auth token, ``<base>.<X-Plivo-Signature-V3-Nonce>``)), where
for a POST ``<base>`` is the URL without its query, then ``?`` and the query's
``key=value`` pairs sorted (joined by ``&``, and a ``.`` after them when there
are any), then each POST parameter's name and value, sorted by name. The header
may carry several signatures, comma-separated; one must match. The stream's
upgrade carries none: the stream token is its proof. The routes are off unless
``--plivo-auth-token`` is set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit
from xml.sax.saxutils import escape

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from gateway.config import GatewayConfig
from gateway.telephony.answer import off_routes, request_url, stream_token, text
from gateway.telephony.bridge import CallBridge
from gateway.telephony.call_stream import stream_endpoint
from gateway.telephony.plivo_codec import CONTENT_TYPE, SAMPLE_RATE, PlivoCodec, extra_headers

log = logging.getLogger(__name__)

ANSWER_PATH = "/v1/plivo/answer"
STREAM_PATH = "/v1/plivo/media-stream"
EXTRA_HEADERS_MAX = 512  # bytes, Plivo's limit


def _sorted_pairs(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted(pairs)  # by name, then value (a repeated name's values sorted)


def signature_base(url: str, params: Iterable[tuple[str, str]]) -> str:
    """What a POST's signature V3 covers, but for the nonce."""
    parts = urlsplit(url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    post = _sorted_pairs(params)
    query = "&".join(f"{k}={v}" for k, v in
                     _sorted_pairs(parse_qsl(parts.query, keep_blank_values=True)))
    if query or post:
        base += "?" + query
    if query and post:
        base += "."
    return base + "".join(k + v for k, v in post)


def plivo_signature(auth_token: str, url: str, nonce: str,
                    params: Iterable[tuple[str, str]] = ()) -> str:
    signed = f"{signature_base(url, params)}.{nonce}".encode()
    return base64.b64encode(hmac.new(auth_token.encode(), signed, hashlib.sha256).digest()
                            ).decode()


def signature_ok(auth_token: str, url: str, nonce: str | None,
                 params: Iterable[tuple[str, str]], offered: str | None) -> bool:
    if not nonce or not offered:
        return False
    expected = plivo_signature(auth_token, url, nonce, params).encode()
    return any(hmac.compare_digest(expected, s.strip().encode()) for s in offered.split(","))


class Plivo:
    """Plivo audio streams as a carrier of the bridge (``telephony.bridge.Carrier``)."""

    name = "plivo"
    stream_path = STREAM_PATH
    stream_tokens = True  # our webhook mints one per call

    def __init__(self, config: GatewayConfig) -> None:
        # the auth token also keys the stream tokens, so every gateway behind the
        # same number accepts the others' answers
        self.secret_seed = config.plivo_auth_token
        self.instructions = config.plivo_instructions or ""

    def codec(self, max_bytes: int) -> PlivoCodec:
        return PlivoCodec(max_bytes, self.instructions)

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        return None  # Plivo does not sign the upgrade: the stream token is the proof


def plivo_off(config: GatewayConfig) -> str | None:
    """Why the Plivo routes are off, or None when they are on."""
    if config.plivo_auth_token is None:
        return ("--plivo-auth-token is not set, so nothing would authenticate Plivo's "
                "requests; set it (DUPLEX_GATEWAY_PLIVO_AUTH_TOKEN) to turn them on")
    return None


def plivo_routes(config: GatewayConfig) -> list[BaseRoute]:
    """The answer webhook and the media stream; off without an auth token."""
    if config.plivo_auth_token is None:
        return off_routes("Plivo", ANSWER_PATH, STREAM_PATH)
    bridge = CallBridge(config, Plivo(config))
    auth_token = config.plivo_auth_token

    async def answer_webhook(request: Request) -> Response:
        return await _answer_webhook(request, bridge, auth_token)

    return [Route(ANSWER_PATH, answer_webhook, methods=["POST"]),
            WebSocketRoute(STREAM_PATH, stream_endpoint(bridge))]


async def _answer_webhook(request: Request, bridge: CallBridge, auth_token: str) -> Response:
    """``POST /v1/plivo/answer``: Plivo XML connecting the call to our media stream."""
    form = await request.form()
    params = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    url = request_url(bridge, request)
    if not signature_ok(auth_token, url, request.headers.get("x-plivo-signature-v3-nonce"),
                        params, request.headers.get("x-plivo-signature-v3")):
        log.warning("plivo webhook refused: bad or missing X-Plivo-Signature-V3 for %s", url)
        return text("invalid signature", 403)
    call_id = dict(params).get("CallUUID", "")
    if not call_id:
        return text("CallUUID is required", 400)
    override = request.query_params.get("instructions") or None  # empty: the default
    instructions = override or bridge.config.plivo_instructions or ""
    token = await stream_token(bridge, call_id, instructions)
    if isinstance(token, Response):
        return token
    headers = extra_headers(token, override)
    if len(headers) > EXTRA_HEADERS_MAX:
        return text(f"instructions too long for Plivo's extraHeaders ({EXTRA_HEADERS_MAX} "
                    "bytes in all); set them with --plivo-instructions", 400)
    stream_url = bridge.stream_url(request.url.scheme, request.url.netloc)
    xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response>"
           "<Stream bidirectional=\"true\" keepCallAlive=\"true\" audioTrack=\"inbound\" "
           f"contentType=\"{CONTENT_TYPE};rate={SAMPLE_RATE}\" extraHeaders=\"{headers}\">"
           f"{escape(stream_url)}</Stream></Response>")
    return Response(xml, media_type="application/xml")
