"""Exotel: its stream's authentication, and its codec on the carrier-neutral bridge.

Exotel's Voicebot applet dials a fixed ``wss://`` URL: there is no webhook of ours
to answer the call, so no stream token. What Exotel documents that a gateway can
check is Basic auth: the applet's URL ``wss://KEY:TOKEN@host/v1/exotel/media-stream``
reaches us as ``Authorization: Basic base64(KEY:TOKEN)`` on the upgrade. With
``--exotel-credentials KEY:TOKEN`` the route is on and every upgrade must carry
exactly that (or another gateway's relay proof); without it the route is off
(Exotel's other option, an IP allow-list, is the network's to enforce). The
applet's custom parameters (``?instructions=…`` on the URL) arrive in ``start``.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket

from gateway.config import GatewayConfig
from gateway.telephony.answer import off_routes
from gateway.telephony.bridge import CallBridge
from gateway.telephony.call_stream import stream_endpoint
from gateway.telephony.exotel_codec import ExotelCodec

STREAM_PATH = "/v1/exotel/media-stream"


def basic_auth_ok(credentials: str, offered: str | None) -> bool:
    """``offered`` (an Authorization header) is Basic auth with ``credentials``."""
    scheme, _, encoded = (offered or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(decoded, credentials.encode())


class Exotel:
    """Exotel Voicebot streams as a carrier of the bridge (``telephony.bridge.Carrier``)."""

    name = "exotel"
    stream_path = STREAM_PATH
    stream_tokens = False  # no webhook mints one: Basic auth on the upgrade is the proof

    def __init__(self, credentials: str) -> None:
        # the credentials also key the relay proofs, so every gateway configured
        # alike accepts the others' relays
        self.credentials = credentials
        self.secret_seed: str | None = credentials

    def codec(self, max_bytes: int) -> ExotelCodec:
        return ExotelCodec(max_bytes)

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        if basic_auth_ok(self.credentials, ws.headers.get("authorization")):
            return None
        return f"bad or missing Basic auth for {stream_url}"


def off_reason(config: GatewayConfig) -> str | None:
    """Why the Exotel route is off, or None when it is on."""
    if config.exotel_credentials is None:
        return ("--exotel-credentials is not set, so nothing would authenticate "
                "Exotel's streams")
    return None


def exotel_routes(config: GatewayConfig) -> list[BaseRoute]:
    """The media stream; off (refusing every upgrade) without credentials."""
    if config.exotel_credentials is None:
        return off_routes("Exotel", None, STREAM_PATH)
    bridge = CallBridge(config, Exotel(config.exotel_credentials))
    return [WebSocketRoute(STREAM_PATH, stream_endpoint(bridge))]
