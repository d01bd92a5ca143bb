"""A Plivo audio stream peer that speaks Plivo's documented shapes.

The answer URL's request (``CallUUID`` and friends, form-encoded) carries
``X-Plivo-Signature-V3`` and its nonce. The stream: ``start`` (``callId``,
``streamId``, ``mediaFormat`` in ``start``; the ``extraHeaders`` of our XML as
``extra_headers``, ``;``-separated as in Plivo's example), then ``media`` and
``dtmf``; no ``stop``: the call's end closes the socket. What we send back
(``playAudio``) is played at real time (``carrier_emulator.Playout``); a
``checkpoint`` is answered with ``playedStream`` once played, never after a
``clearAudio``, which is answered with ``clearedAudio``.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx
import numpy as np
import websockets
from carrier_emulator import CarrierSocket, Playout
from twilio_helpers import AUTH_TOKEN
from websockets.asyncio.client import ClientConnection

from gateway.audio import ulaw_decode
from gateway.telephony.plivo import plivo_signature

FRAME_BYTES = 160  # 20 ms of μ-law at 8 kHz


@dataclass
class StreamXML:
    stream_url: str
    attributes: dict[str, str]


def parse_stream_xml(xml: str) -> StreamXML:
    found = re.search(r"<Stream ([^>]*)>([^<]*)</Stream>", xml)
    assert found is not None, xml
    attrs = {k: html.unescape(v) for k, v in re.findall(r'(\w+)="([^"]*)"', found.group(1))}
    return StreamXML(html.unescape(found.group(2)), attrs)


def form(call_id: str) -> dict[str, str]:
    return {"CallUUID": call_id, "From": "14155551234", "To": "14155556789",
            "Direction": "inbound", "CallStatus": "ringing", "Event": "StartApp"}


def signed(url: str, params: dict[str, str], token: str = AUTH_TOKEN) -> dict[str, str]:
    nonce = str(secrets.randbelow(10**20))
    return {"X-Plivo-Signature-V3": plivo_signature(token, url, nonce, params.items()),
            "X-Plivo-Signature-V3-Nonce": nonce}


async def answer_webhook(http_base: str, call_id: str, *, query: str = "",
                         sign: bool = True) -> httpx.Response:
    url, params = f"{http_base}/v1/plivo/answer{query}", form(call_id)
    async with httpx.AsyncClient() as http:
        return await http.post(url, content=urlencode(params).encode(), headers={
            "content-type": "application/x-www-form-urlencoded",
            **(signed(url, params) if sign else {})})


def new_call_id() -> str:
    return str(uuid.uuid4())


@dataclass
class PlivoEmulator(CarrierSocket):
    ws: ClientConnection
    call_id: str
    stream_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    seq: int = 0
    chunk: int = 0
    started_at: float = 0.0
    received: list[dict[str, object]] = field(default_factory=list)
    cleared_acks: int = 0

    def __post_init__(self) -> None:
        self.playout = Playout(self._ack, 8, acks_flushed=False)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def dial(cls, xml: StreamXML, call_id: str, *, ws_url: str | None = None,
                   extra_headers: str | None = None) -> PlivoEmulator:
        ws = await websockets.connect(ws_url or xml.stream_url)
        em = cls(ws, call_id)
        headers = xml.attributes["extraHeaders"] if extra_headers is None else extra_headers
        await em.start(headers.replace(",", ";"))
        return em

    # -- Plivo → gateway -------------------------------------------------------------------

    async def _send(self, event: str, **body: object) -> None:
        self.seq += 1
        await self.ws.send(json.dumps({"event": event, "sequenceNumber": self.seq, **body}))

    async def start(self, extra_headers: str) -> None:
        self.started_at = time.monotonic()
        await self._send("start", start={
            "callId": self.call_id, "streamId": self.stream_id,
            "accountId": "MA" + "X" * 18, "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}},
            extra_headers=extra_headers)
        self._serve()

    async def speak(self, ulaw: bytes, *, realtime: bool = False) -> None:
        for start in range(0, len(ulaw), FRAME_BYTES):
            self.chunk += 1
            stamp = (self.chunk - 1) * 20
            if realtime:
                await self._pace(stamp)
            await self._send("media", streamId=self.stream_id, media={
                "track": "inbound", "timestamp": str(stamp), "chunk": self.chunk,
                "payload": base64.b64encode(ulaw[start:start + FRAME_BYTES]).decode()})

    async def dtmf(self, digit: str) -> None:
        await self._send("dtmf", streamId=self.stream_id,
                         dtmf={"track": "inbound", "digit": digit, "timestamp": "0"})

    async def _ack(self, name: str) -> None:
        await self._send("playedStream", streamId=self.stream_id, name=name)

    async def hang_up(self) -> None:
        """The call ends: Plivo closes the stream (normally)."""
        self._stop_tasks()
        await self.ws.close(1000)

    # -- gateway → Plivo -------------------------------------------------------------------

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            self.received.append(msg)
            match msg["event"]:
                case "playAudio":
                    media = msg["media"]
                    assert (media["contentType"], media["sampleRate"]) == ("audio/x-mulaw",
                                                                           8000)
                    await self.playout.audio_in(base64.b64decode(media["payload"]))
                case "checkpoint":
                    assert msg["streamId"] == self.stream_id, msg
                    await self.playout.point_in(msg["name"])
                case "clearAudio":
                    assert msg["streamId"] == self.stream_id, msg
                    await self.playout.clear()
                    await self._send("clearedAudio", streamId=self.stream_id)

    def pcm(self) -> np.ndarray:
        return ulaw_decode(np.frombuffer(bytes(self.playout.audio), dtype=np.uint8))
