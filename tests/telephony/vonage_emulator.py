"""A Vonage Voice API peer that speaks Vonage's documented shapes: the answer
webhook signed with a JWT (HS256 over the signature secret, ``payload_hash`` of
the body); the socket's first message ``websocket:connected`` with the NCCO's
``content-type`` and its headers at the top level; then binary 16-bit PCM, one
20 ms frame (640 bytes at 16 kHz) a message, at real time; ``websocket:dtmf``.
Outbound it buffers our binary frames (each must be one whole frame), plays them
at real time, echoes each ``notify`` as ``websocket:notify`` once the audio before
it has played, and on ``clear`` drops the buffer and answers ``websocket:cleared``
(Vonage documents no echo of pending notifies). It hangs up by closing normally."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import websockets
from carrier_emulator import CarrierSocket, Playout
from websockets.asyncio.client import ClientConnection

from gateway.telephony.vonage import sign

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = 640  # 20 ms at 16 kHz
SECRET = "vonage-signature-secret-" + "0" * 16


def new_uuid() -> str:
    return str(uuid.uuid4())


async def answer(http_base: str, call_id: str, *, query: str = "", secret: str = SECRET,
                 post: bool = False, authorization: str | None = None) -> httpx.Response:
    """Vonage's answer webhook: GET with the call in the query (its default), or POST JSON."""
    fields = {"uuid": call_id, "conversation_uuid": "CON-" + new_uuid(),
              "from": "447700900000", "to": "447700900001"}
    body = json.dumps(fields).encode() if post else b""
    auth = authorization if authorization is not None else (
        "Bearer " + sign(secret, body, time.time(), application_id=new_uuid()))
    async with httpx.AsyncClient() as http:
        if post:
            return await http.post(f"{http_base}/v1/vonage/answer{query}", content=body,
                                   headers={"Authorization": auth,
                                            "Content-Type": "application/json"})
        sep = "&" if query else "?"
        qs = "&".join(f"{k}={v}" for k, v in fields.items())
        return await http.get(f"{http_base}/v1/vonage/answer{query}{sep}{qs}",
                              headers={"Authorization": auth})


@dataclass
class VonageCall(CarrierSocket):
    ws: ClientConnection
    endpoint: dict[str, Any]  # the NCCO's websocket endpoint
    frames_sent: int = 0
    started_at: float = 0.0
    texts: list[dict[str, Any]] = field(default_factory=list)  # every text message
    odd_frames: int = 0  # binary messages that were not one whole frame

    def __post_init__(self) -> None:
        self.playout = Playout(self._ack, RATE * 2 / 1000, acks_flushed=False)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def dial(cls, ncco: list[dict[str, Any]], *, ws_url: str | None = None,
                   headers: dict[str, str] | None = None) -> VonageCall:
        endpoint = ncco[0]["endpoint"][0]
        assert ncco[0]["action"] == "connect" and endpoint["type"] == "websocket"
        ws = await websockets.connect(ws_url or endpoint["uri"])
        call = cls(ws, endpoint)
        await call.connected(endpoint["headers"] if headers is None else headers)
        return call

    @property
    def call_id(self) -> str:
        return str(self.endpoint["headers"]["call"])

    def pcm(self) -> np.ndarray:
        """Every reply byte we were sent, as the 16-bit PCM it is."""
        return np.frombuffer(bytes(self.playout.audio), dtype="<i2").astype(np.int16)

    # -- Vonage → gateway ------------------------------------------------------------

    async def connected(self, headers: dict[str, str]) -> None:
        await self.ws.send(json.dumps({"event": "websocket:connected",
                                       "content-type": self.endpoint["content-type"],
                                       **headers}))
        self.started_at = time.monotonic()
        self._serve()

    async def speak(self, pcm: bytes) -> None:
        """``pcm`` as Vonage sends it: one 20 ms frame a message, at real time."""
        for start in range(0, len(pcm), FRAME_BYTES):
            await self._pace(self.frames_sent * FRAME_MS)
            self.frames_sent += 1
            await self.ws.send(pcm[start:start + FRAME_BYTES].ljust(FRAME_BYTES, b"\x00"))

    async def dtmf(self, digit: str) -> None:
        await self.ws.send(json.dumps({"event": "websocket:dtmf", "digit": digit,
                                       "duration": 260}))

    async def hang_up(self) -> None:
        await self.ws.close(1000)

    async def _ack(self, name: str) -> None:
        await self.ws.send(json.dumps({"event": "websocket:notify",
                                       "payload": {"name": name}}))

    # -- gateway → Vonage --------------------------------------------------------------

    async def _read(self) -> None:
        async for raw in self.ws:
            if isinstance(raw, bytes):
                self.odd_frames += len(raw) != FRAME_BYTES
                await self.playout.audio_in(raw)
            else:
                msg = json.loads(raw)
                self.texts.append(msg)
                if msg.get("action") == "notify":
                    await self.playout.point_in(msg["payload"]["name"])
                elif msg.get("action") == "clear":
                    await self.playout.clear()
                    await self.ws.send(json.dumps({"event": "websocket:cleared"}))


