"""What every telephony carrier shares: one call = one leased session.

A carrier (``Carrier``) brings its codec (its messages, audio and
acknowledgements: ``gateway.transports.codec``), its stream path and its check of
a stream's upgrade; its webhook, which answers a call with the stream's URL and a
stream token, is its own module's (``telephony.twilio``). The bridge brings the
rest, the same for all (``telephony.call_stream``): the stream token's key, the
call → session binding in Redis (a second stream of a call resumes the call's
session), the relay of such a stream to the process that owns the session, the
handshake up to the carrier's start, and the shared loop.
"""

from __future__ import annotations

from typing import Protocol

from starlette.websockets import WebSocket

from duplex.store.client import connect
from duplex.store.nodes import Nodes
from gateway.config import GatewayConfig
from gateway.telephony.calls import CallRegistry
from gateway.transports.codec import Codec

TOKEN_TTL_S = 600  # a stream (or a duplicate one) connects right after the webhook


class Carrier(Protocol):
    """One carrier's side of the bridge."""

    name: str  # "twilio": its log lines, its Redis keys, its stream-token key
    stream_path: str  # "/v1/twilio/media-stream"
    # the credential the stream-token key derives from, so every gateway behind one
    # number accepts the others' tokens; None: a random key shared in Redis
    secret_seed: str | None
    # its start must carry the stream token our webhook minted (Twilio's does);
    # False where no webhook of ours answers the call and the upgrade's own proof
    # is the whole check (Exotel's Basic auth)
    stream_tokens: bool

    def codec(self, max_bytes: int) -> Codec:
        """A fresh codec for one stream. Before the start it parses the carrier's
        greeting as ``Hello`` and its start as ``StreamStart`` (or ``Refuse``)."""
        ...

    def upgrade_refusal(self, ws: WebSocket, stream_url: str) -> str | None:
        """Why the carrier's own proof on the upgrade fails (a signature over
        ``stream_url``), or None (it holds, or the carrier's signatures are off)."""
        ...


class CallBridge:
    """Process-wide state of one carrier's calls: the token key and the registry."""

    def __init__(self, config: GatewayConfig, carrier: Carrier) -> None:
        self.config = config
        self.carrier = carrier
        seed = carrier.secret_seed
        self._secret = (f"dg-{carrier.name}-stream\n" + seed).encode() if seed else None
        self._registry: CallRegistry | None = None

    async def secret(self) -> bytes:
        """The key of stream tokens and relay proofs."""
        if self._secret is None:
            self._secret = await self.registry.shared_secret()
        return self._secret

    @property
    def registry(self) -> CallRegistry:
        if self._registry is None:  # lazily: the client must be made on the loop
            cfg = self.config
            client = connect(cfg.redis_url or "unix:///nonexistent",
                             timeout_s=cfg.store_timeout_s)
            # a binding lives as long as its session can (a day where sessions never end)
            self._registry = CallRegistry(Nodes(client), (cfg.max_session_s or 24 * 3600.0)
                                          + cfg.disconnect_grace_s, self.carrier.name)
        return self._registry

    def public_base(self, scheme: str, host: str) -> str:
        return (self.config.public_url or f"{scheme}://{host}").rstrip("/")

    def stream_url(self, scheme: str, host: str) -> str:
        base = self.public_base(scheme, host)
        ws_base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return ws_base + self.carrier.stream_path
