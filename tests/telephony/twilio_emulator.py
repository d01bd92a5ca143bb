"""A Twilio Media Streams peer that speaks Twilio's exact shapes (research/peers.md §3.2).

Inbound: string ``sequenceNumber`` counting every message, per-track
``media.chunk``, ``media.timestamp`` in ms since the stream started, 20 ms μ-law
frames of 160 bytes. Outbound: it buffers our ``media``, "plays" it at real
time (``carrier_emulator.Playout``, as every emulator does), and echoes each
``mark`` once the audio before it has played; on ``clear`` it drops what is
buffered and echoes the pending marks at once.
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
from typing import Any

import httpx
import numpy as np
import websockets
from carrier_emulator import CarrierSocket, Playout
from websockets.asyncio.client import ClientConnection

from gateway.audio import ulaw_decode, ulaw_encode

RATE = 8000
FRAME_BYTES = 160  # 20 ms of μ-law at 8 kHz


def ulaw_tone(seconds: float, freq: float = 440.0, amplitude: float = 0.3) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    pcm = (amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)
    return ulaw_encode(pcm).tobytes()


def ulaw_silence(seconds: float) -> bytes:
    return ulaw_encode(np.zeros(int(RATE * seconds), dtype=np.int16)).tobytes()


def new_sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


@dataclass
class TwiML:
    stream_url: str
    parameters: dict[str, str]


def parse_twiml(xml: str) -> TwiML:
    url = re.search(r'<Stream url="([^"]*)"', xml)
    assert url is not None, xml
    params = dict(re.findall(r'<Parameter name="([^"]*)" value="([^"]*)"/>', xml))
    return TwiML(html.unescape(url.group(1)),
                 {html.unescape(k): html.unescape(v) for k, v in params.items()})


async def webhook(http_base: str, call_sid: str, *, query: str = "",
                  headers: dict[str, str] | None = None) -> httpx.Response:
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32, "From": "+15550001111",
            "To": "+15550002222", "CallStatus": "ringing"}
    async with httpx.AsyncClient() as http:
        return await http.post(f"{http_base}/v1/twilio/voice{query}", data=form,
                               headers=headers or {})


@dataclass
class Emulator(CarrierSocket):
    ws: ClientConnection
    call_sid: str
    stream_sid: str = field(default_factory=lambda: new_sid("MZ"))
    seq: int = 0
    chunk: int = 0
    started_at: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Twilio plays our media at real time, echoes each mark once played, and on
        # a clear drops the buffer and echoes the pending marks at once
        self.playout = Playout(self._ack, 8.0, acks_flushed=True)
        self._tasks: list[asyncio.Task[None]] = []

    # what the tests read, kept under Twilio's names
    @property
    def audio(self) -> bytearray:  # every outbound payload
        return self.playout.audio

    @property
    def played_marks(self) -> list[str]:  # echoed after playing
        return self.playout.played

    @property
    def flushed_marks(self) -> list[str]:  # echoed because of a clear
        return self.playout.flushed

    @property
    def marks_before_clear(self) -> list[str] | None:  # played_marks at the 1st clear
        return self.playout.played_before_clear

    @property
    def clears(self) -> int:
        return self.playout.clears

    @classmethod
    async def dial(cls, twiml: TwiML, call_sid: str, *, ws_url: str | None = None,
                   headers: dict[str, str] | None = None,
                   parameters: dict[str, str] | None = None) -> Emulator:
        ws = await websockets.connect(ws_url or twiml.stream_url, additional_headers=headers)
        em = cls(ws, call_sid)
        await em.start(parameters if parameters is not None else twiml.parameters)
        return em

    # -- Twilio → gateway ------------------------------------------------------------

    async def _send(self, event: str, **body: Any) -> None:
        self.seq += 1
        await self.ws.send(json.dumps({"event": event, "sequenceNumber": str(self.seq),
                                       "streamSid": self.stream_sid, **body}))

    async def start(self, parameters: dict[str, str]) -> None:
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call",
                                       "version": "1.0.0"}))
        self.started_at = time.monotonic()
        await self._send("start", start={
            "accountSid": "AC" + "0" * 32, "streamSid": self.stream_sid,
            "callSid": self.call_sid, "tracks": ["inbound"], "customParameters": parameters,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}})
        self._serve()

    async def speak(self, ulaw: bytes, *, realtime: bool = False) -> None:
        """Send ``ulaw`` as 20 ms media frames (at Twilio's cadence with ``realtime``)."""
        for start in range(0, len(ulaw), FRAME_BYTES):
            self.chunk += 1
            stamp = (self.chunk - 1) * 20
            if realtime:
                await self._pace(stamp)
            await self._send("media", media={
                "track": "inbound", "chunk": str(self.chunk), "timestamp": str(stamp),
                "payload": base64.b64encode(ulaw[start:start + FRAME_BYTES]).decode()})

    async def dtmf(self, digit: str) -> None:
        await self._send("dtmf", dtmf={"track": "inbound_track", "digit": digit})

    async def stop(self) -> None:
        await self._send("stop", stop={"accountSid": "AC" + "0" * 32,
                                       "callSid": self.call_sid})

    # -- gateway → Twilio --------------------------------------------------------------

    async def _ack(self, name: str) -> None:
        await self._send("mark", mark={"name": name})

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            assert msg.get("streamSid") == self.stream_sid, msg
            self.received.append(msg)
            await self._play(msg)
            await self.playout.notify()

    # -- waiting on what the gateway did ------------------------------------------------

    async def until(self, predicate: Any, timeout: float = 20.0) -> None:
        await self.playout.until(predicate, timeout)

    def played_ms(self) -> float:
        return self.playout.played_ms()

    def marks_of(self, response_id: str) -> list[str]:
        return [m["mark"]["name"] for m in self.received
                if m["event"] == "mark" and m["mark"]["name"].rpartition(":")[0] == response_id]

    def response_ids(self) -> list[str]:
        seen: list[str] = []
        for m in self.received:
            if m["event"] == "mark":
                rid = m["mark"]["name"].rpartition(":")[0]
                if rid not in seen:
                    seen.append(rid)
        return seen

    def pcm(self) -> np.ndarray:
        return ulaw_decode(np.frombuffer(bytes(self.audio), dtype=np.uint8))


def mark_ms(name: str) -> float:
    return float(name.rpartition(":")[2])
