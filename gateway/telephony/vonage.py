"""Vonage: its answer webhook, its signed-webhook JWTs, and its codec on the bridge.

``/v1/vonage/answer`` (GET, Vonage's default, or POST JSON) answers a call with an
NCCO whose ``connect`` action reaches ``/v1/vonage/media-stream`` as a ``websocket``
endpoint (``audio/l16;rate=16000``); the endpoint's ``headers`` (at most 512 bytes,
Vonage's limit) carry the call's uuid, a stream token and the instructions, and
come back in the socket's first message (``telephony.vonage_codec``).

Vonage signs its webhooks with a JWT: ``Authorization: Bearer`` HS256 over the
account's signature secret, whose ``payload_hash`` claim is the SHA-256 of the
body. With ``--vonage-signature-secret`` the routes are on and each answer must
carry a valid one; without it they are off. Vonage does not sign the socket's
upgrade: the stream token, minted by the signed answer, is what the socket proves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from duplex.errors import DuplexError
from gateway.config import GatewayConfig
from gateway.telephony.answer import off_routes, text
from gateway.telephony.bridge import TOKEN_TTL_S, CallBridge
from gateway.telephony.call_stream import stream_endpoint
from gateway.telephony.tokens import mint_stream_token
from gateway.telephony.vonage_codec import CALL_HEADER, CONTENT_TYPE, VonageCodec

log = logging.getLogger(__name__)

ANSWER_PATH = "/v1/vonage/answer"
STREAM_PATH = "/v1/vonage/media-stream"
MAX_HEADERS_BYTES = 512  # Vonage's limit on a websocket endpoint's headers
CLOCK_SKEW_S = 300  # how far a JWT's iat may be from our clock


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def jwt_refusal(secret: str, authorization: str | None, body: bytes,
                now: float) -> str | None:
    """Why ``authorization`` is not Vonage's signature of ``body``, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token.count(".") != 2:
        return "no Bearer JWT"
    head, claims, signature = token.strip().split(".")
    try:
        header, payload = json.loads(_b64url(head)), json.loads(_b64url(claims))
        offered = _b64url(signature)
    except (binascii.Error, ValueError):
        return "a JWT that does not decode"
    if not isinstance(header, dict) or header.get("alg") != "HS256" or not isinstance(
            payload, dict):
        return "a JWT that is not HS256"
    expected = hmac.new(secret.encode(), f"{head}.{claims}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, offered):
        return "a JWT not signed with the signature secret"
    return _claims_refusal(payload, body, now)


def _claims_refusal(claims: dict[str, Any], body: bytes, now: float) -> str | None:
    iat = claims.get("iat")
    if not isinstance(iat, int | float) or abs(now - iat) > CLOCK_SKEW_S:
        return "a JWT issued too far from now (iat)"
    exp = claims.get("exp")
    if isinstance(exp, int | float) and exp < now:
        return "an expired JWT"
    if body and claims.get("payload_hash") != hashlib.sha256(body).hexdigest():
        return "a JWT whose payload_hash is not the body's"
    return None


def sign(secret: str, body: bytes, now: float, **claims: object) -> str:
    """A JWT as Vonage signs a webhook (for tests and tools)."""
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    content = {"iat": int(now), "jti": f"{now}", "iss": "Vonage",
               "payload_hash": hashlib.sha256(body).hexdigest(), **claims}
    signing = f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(content)}"
    mac = hmac.new(secret.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


class Vonage:
    """The Vonage Voice API WebSocket as a carrier of the bridge (``telephony.bridge.Carrier``)."""

    name = "vonage"
    stream_path = STREAM_PATH
    stream_tokens = True

    def __init__(self, signature_secret: str) -> None:
        # the secret also keys the stream tokens, so every gateway configured alike
        # accepts the others' NCCOs
        self.signature_secret = signature_secret
        self.secret_seed: str | None = signature_secret

    def codec(self, max_bytes: int) -> VonageCodec:
        return VonageCodec(max_bytes)

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        return None  # Vonage signs no upgrade: the stream token in the first message is the proof


def off_reason(config: GatewayConfig) -> str | None:
    """Why the Vonage routes are off, or None when they are on."""
    if config.vonage_signature_secret is None:
        return ("--vonage-signature-secret is not set, so nothing would authenticate "
                "Vonage's webhooks")
    return None


def vonage_routes(config: GatewayConfig) -> list[BaseRoute]:
    """The answer webhook and the media stream; off without the signature secret."""
    if config.vonage_signature_secret is None:
        return off_routes("Vonage", ANSWER_PATH, STREAM_PATH, methods=("GET", "POST"))
    bridge = CallBridge(config, Vonage(config.vonage_signature_secret))

    async def answer(request: Request) -> Response:
        return await _answer(request, bridge, config.vonage_signature_secret or "")

    return [Route(ANSWER_PATH, answer, methods=["GET", "POST"]),
            WebSocketRoute(STREAM_PATH, stream_endpoint(bridge))]



async def _answer(request: Request, bridge: CallBridge, secret: str) -> Response:
    """``/v1/vonage/answer``: the NCCO connecting the call to our media stream."""
    body = await request.body()
    why = jwt_refusal(secret, request.headers.get("authorization"), body, time.time())
    if why is not None:
        log.warning("vonage answer refused: %s", why)
        return text("invalid signature", 401)
    fields: dict[str, Any] = dict(request.query_params)
    if body:
        try:
            posted = json.loads(body)
        except ValueError:
            return text("the body is not JSON", 400)
        fields.update(posted if isinstance(posted, dict) else {})
    call_id = fields.get("uuid")
    if not isinstance(call_id, str) or not call_id:
        return text("uuid is required", 400)
    instructions = request.query_params.get("instructions", "")
    try:
        token_key = await bridge.secret()
    except DuplexError as exc:
        log.warning("vonage answer failed: %s", exc.message)
        return text("store unavailable", 503)
    token = mint_stream_token(token_key, call_id, instructions, int(time.time()) + TOKEN_TTL_S)
    headers = {CALL_HEADER: call_id, "token": token,
               **({"instructions": instructions} if instructions else {})}
    if len(json.dumps(headers).encode()) > MAX_HEADERS_BYTES:
        return text(f"the instructions do not fit Vonage's {MAX_HEADERS_BYTES}-byte "
                    "websocket headers", 400)
    ncco = [{"action": "connect", "endpoint": [{
        "type": "websocket", "uri": bridge.stream_url(request.url.scheme, request.url.netloc),
        "content-type": CONTENT_TYPE, "headers": headers}]}]
    return JSONResponse(ncco)
