"""What every carrier's webhook shares: the answer's stream token, XML, the off routes.

A webhook answers a call with markup (TwiML-like XML, or JSON) that connects it
to our media stream and carries a stream token for that call
(``telephony.tokens``). Where a carrier's credentials are not configured its
routes are off: the webhook answers 404 and the stream upgrade 403, so no
unauthenticated traffic can open a session.
"""

from __future__ import annotations

import time
from xml.sax.saxutils import escape

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from duplex.close_codes import CloseCode
from duplex.errors import DuplexError
from gateway.telephony.bridge import TOKEN_TTL_S, CallBridge
from gateway.telephony.tokens import mint_stream_token


def xml_attr(value: str) -> str:
    """A double-quoted XML attribute (quoteattr may pick single quotes)."""
    return '"' + escape(value, {'"': "&quot;"}) + '"'


def text(body: str, status: int) -> Response:
    return Response(body, status_code=status, media_type="text/plain")


async def stream_token(bridge: CallBridge, call_id: str, instructions: str) -> str | Response:
    """A stream token for ``call_id``, or the 503 when the store cannot give its key."""
    try:
        secret = await bridge.secret()
    except DuplexError:
        return text("store unavailable", 503)
    return mint_stream_token(secret, call_id, instructions, int(time.time()) + TOKEN_TTL_S)


def request_url(bridge: CallBridge, request: Request) -> str:
    """The URL the carrier called, as its signature covers it (``--public-url``'s base)."""
    url = bridge.public_base(request.url.scheme, request.url.netloc) + request.url.path
    return url + ("?" + request.url.query if request.url.query else "")


def off_routes(carrier: str, webhook_path: str | None, stream_path: str,
               methods: tuple[str, ...] = ("POST",)) -> list[BaseRoute]:
    """Routes that refuse everything: nothing could tell the carrier from anyone else.
    ``webhook_path`` None: the carrier has only a stream (Exotel)."""

    async def off_webhook(request: Request) -> Response:
        return text(f"the {carrier} routes are off on this gateway (its startup log "
                    "says why)", 404)

    async def off_stream(ws: WebSocket) -> None:
        await ws.close(CloseCode.POLICY)  # before the accept: the upgrade is answered 403

    stream: list[BaseRoute] = [WebSocketRoute(stream_path, off_stream)]
    if webhook_path is None:
        return stream
    return [Route(webhook_path, off_webhook, methods=list(methods)), *stream]
