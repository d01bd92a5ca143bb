"""An Exotel Voicebot peer that speaks Exotel's documented shapes (AgentStream's
WebSocket protocol): ``connected``; ``start`` with ``stream_sid``, ``call_sid``,
``custom_parameters`` and ``media_format``; ``media`` every 100 ms of 16-bit PCM
with string ``sequence_number``/``chunk``/``timestamp``;
``dtmf``; ``stop``. Outbound it buffers our ``media``, plays it at real time, and
echoes each ``mark`` once played; on ``clear`` it drops the buffer and echoes the
pending marks at once."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from carrier_emulator import CarrierSocket, Playout
from websockets.asyncio.client import ClientConnection

RATE = 8000
SEND_MS = 100  # Exotel sends the caller's audio 100 ms at a time
CREDENTIALS = "exotel-key:exotel-token-0123456789"


def basic(credentials: str = CREDENTIALS) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


def new_sid() -> str:
    return secrets.token_hex(16)


@dataclass
class ExotelCall(CarrierSocket):
    ws: ClientConnection
    call_sid: str = field(default_factory=new_sid)
    stream_sid: str = field(default_factory=new_sid)
    seq: int = 0
    chunk: int = 0
    started_at: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.playout = Playout(self._ack, RATE * 2 / 1000, acks_flushed=True)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def dial(cls, url: str, *, call_sid: str | None = None,
                   headers: dict[str, str] | None = None,
                   parameters: dict[str, str] | None = None,
                   media_format: dict[str, str] | None = None) -> ExotelCall:
        ws = await websockets.connect(url, additional_headers=basic() if headers is None
                                      else headers)
        call = cls(ws, call_sid or new_sid())
        await call.start(parameters or {}, media_format)
        return call

    def pcm(self) -> np.ndarray:
        """Every reply byte we were sent, as the 16-bit PCM it is."""
        return np.frombuffer(bytes(self.playout.audio), dtype="<i2").astype(np.int16)

    # -- Exotel → gateway ------------------------------------------------------------

    async def _send(self, event: str, **body: Any) -> None:
        self.seq += 1
        await self.ws.send(json.dumps({"event": event, "sequence_number": str(self.seq),
                                       "stream_sid": self.stream_sid, **body}))

    async def start(self, parameters: dict[str, str],
                    media_format: dict[str, str] | None = None) -> None:
        media_format = media_format or {"encoding": "audio/x-raw", "sample_rate": "8000",
                                        "bit_rate": "16"}
        self.playout.bytes_per_ms = int(media_format["sample_rate"]) * 2 / 1000
        await self.ws.send(json.dumps({"event": "connected"}))
        self.started_at = time.monotonic()
        await self._send("start", start={
            "stream_sid": self.stream_sid, "call_sid": self.call_sid,
            "account_sid": "exotel-account", "from": "+919876543210", "to": "+918047491899",
            "custom_parameters": parameters,
            "media_format": media_format})
        self._serve()

    async def speak(self, pcm: bytes, rate: int = RATE) -> None:
        """Send ``pcm`` as Exotel does: 100 ms media messages at real time."""
        step = rate * 2 * SEND_MS // 1000
        for start in range(0, len(pcm), step):
            self.chunk += 1
            stamp = (self.chunk - 1) * SEND_MS
            await self._pace(stamp)
            await self._send("media", media={
                "chunk": str(self.chunk), "timestamp": str(stamp),
                "payload": base64.b64encode(pcm[start:start + step]).decode()})

    async def dtmf(self, digit: str) -> None:
        await self._send("dtmf", dtmf={"digit": digit, "duration": "100"})

    async def stop(self) -> None:
        await self._send("stop", stop={"call_sid": self.call_sid,
                                       "account_sid": "exotel-account",
                                       "reason": "callended"})

    async def _ack(self, name: str) -> None:
        await self._send("mark", mark={"name": name})

    # -- gateway → Exotel --------------------------------------------------------------

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            assert msg.get("stream_sid") == self.stream_sid, msg
            self.received.append(msg)
            await self._play(msg)
