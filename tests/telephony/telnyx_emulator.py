"""A Telnyx media streaming peer that speaks Telnyx's documented shapes.

The TeXML application's request (``CallSid`` and friends, form-encoded) is
signed as Telnyx signs it: Ed25519 over ``<timestamp>|<body>``. The stream:
``connected``, then ``start`` (``stream_id`` at the top, the call and
``media_format`` in ``start``, the TeXML's ``<Parameter>``s as
``custom_parameters``), then ``media`` with string ``sequence_number``,
``chunk`` and ``timestamp``; ``dtmf``; ``stop``. What we send back is played at
real time (``carrier_emulator.Playout``); marks are echoed once played, and the
pending ones at once on a ``clear``.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx
import numpy as np
import websockets
from carrier_emulator import CarrierSocket, Playout
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.asyncio.client import ClientConnection

from gateway.audio import alaw_decode, ulaw_decode

KEY = Ed25519PrivateKey.from_private_bytes(b"telnyx-test-key-0123456789abcdef")
PUBLIC_KEY = base64.b64encode(KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
                              ).decode()
FRAME_MS = 20


def signed_headers(body: bytes, key: Ed25519PrivateKey = KEY,
                   timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = base64.b64encode(key.sign(ts.encode() + b"|" + body)).decode()
    return {"telnyx-signature-ed25519": signature, "telnyx-timestamp": ts,
            "content-type": "application/x-www-form-urlencoded"}


@dataclass
class TeXML:
    stream_url: str
    attributes: dict[str, str]
    parameters: dict[str, str]


def parse_texml(xml: str) -> TeXML:
    stream = re.search(r"<Stream ([^>]*)>", xml)
    assert stream is not None and "<Start>" in xml, xml
    attrs = {k: html.unescape(v) for k, v in re.findall(r'(\w+)="([^"]*)"', stream.group(1))}
    params = dict(re.findall(r'<Parameter name="([^"]*)" value="([^"]*)"/>', xml))
    return TeXML(attrs["url"], attrs,
                 {html.unescape(k): html.unescape(v) for k, v in params.items()})


async def voice_webhook(http_base: str, call_sid: str, *, query: str = "",
                        sign: bool = True) -> httpx.Response:
    body = urlencode({"CallSid": call_sid, "AccountSid": secrets.token_hex(8),
                      "From": "+13122010094", "To": "+13122123456",
                      "CallStatus": "ringing", "Direction": "inbound"}).encode()
    headers = signed_headers(body) if sign else {
        "content-type": "application/x-www-form-urlencoded"}
    async with httpx.AsyncClient() as http:
        return await http.post(f"{http_base}/v1/telnyx/voice{query}", content=body,
                               headers=headers)


def new_call_id() -> str:
    return "v3:" + secrets.token_urlsafe(30)


@dataclass
class TelnyxEmulator(CarrierSocket):
    ws: ClientConnection
    call_id: str  # call_control_id
    encoding: str = "PCMU"
    rate: int = 8000
    stream_id: str = field(default_factory=lambda: secrets.token_hex(16).upper())
    seq: int = 0
    chunk: int = 0
    started_at: float = 0.0
    received: list[dict[str, object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        bytes_per_ms = 2 * self.rate / 1000 if self.encoding == "L16" else self.rate / 1000
        self.playout = Playout(self._ack, bytes_per_ms, acks_flushed=True)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def dial(cls, texml: TeXML, call_id: str, *, ws_url: str | None = None,
                   parameters: dict[str, str] | None = None) -> TelnyxEmulator:
        ws = await websockets.connect(ws_url or texml.stream_url)
        codec = texml.attributes.get("codec", "PCMU")
        em = cls(ws, call_id, codec, int(texml.attributes.get("bidirectionalSamplingRate",
                                                               "8000")))
        await em.start(parameters if parameters is not None else texml.parameters)
        return em

    # -- Telnyx → gateway -----------------------------------------------------------------

    async def _send(self, event: str, **body: object) -> None:
        self.seq += 1
        await self.ws.send(json.dumps({"event": event, "sequence_number": str(self.seq),
                                       **body, "stream_id": self.stream_id}))

    async def start(self, parameters: dict[str, str]) -> None:
        await self.ws.send(json.dumps({"event": "connected", "version": "1.0.0"}))
        self.started_at = time.monotonic()
        await self._send("start", start={
            "user_id": secrets.token_hex(8), "call_control_id": self.call_id,
            "client_state": None, "from": "+13122010094", "to": "+13122123456",
            "custom_parameters": parameters,
            "media_format": {"encoding": self.encoding, "sample_rate": self.rate,
                             "channels": 1}})
        self._serve()

    async def speak(self, audio: bytes, *, realtime: bool = False) -> None:
        """Send ``audio`` (in the stream's encoding) as 20 ms media frames."""
        step = int(self.playout.bytes_per_ms * FRAME_MS)
        for start in range(0, len(audio), step):
            self.chunk += 1
            stamp = (self.chunk - 1) * FRAME_MS
            if realtime:
                await self._pace(stamp)
            await self._send("media", media={
                "track": "inbound", "chunk": str(self.chunk), "timestamp": str(stamp),
                "payload": base64.b64encode(audio[start:start + step]).decode()})

    async def dtmf(self, digit: str) -> None:
        await self._send("dtmf", occurred_at="2025-01-01T00:00:00Z", dtmf={"digit": digit})

    async def stop(self) -> None:
        await self._send("stop", stop={"user_id": "u", "call_control_id": self.call_id})

    async def _ack(self, name: str) -> None:
        await self._send("mark", mark={"name": name})

    # -- gateway → Telnyx -----------------------------------------------------------------

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            self.received.append(msg)
            await self._play(msg)

    def pcm(self) -> np.ndarray:
        data = bytes(self.playout.audio)
        if self.encoding == "L16":
            return np.frombuffer(data, dtype=">i2").astype(np.int16)
        codes = np.frombuffer(data, dtype=np.uint8)
        return ulaw_decode(codes) if self.encoding == "PCMU" else alaw_decode(codes)
