"""A small real WebSocket client for the realtime protocol, with audio helpers."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

RATE = 24000


def tone(seconds: float, freq: float = 440.0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(RATE * seconds), dtype=np.int16)


def b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


class RealtimeClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> RealtimeClient:
        return cls(await websockets.connect(url, max_size=None, **kwargs))

    async def close(self) -> None:
        await self.ws.close()

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def append(self, pcm: np.ndarray, frame_ms: int = 20) -> None:
        step = RATE * frame_ms // 1000
        for start in range(0, len(pcm), step):
            await self.send("input_audio_buffer.append", audio=b64(pcm[start:start + step]))

    async def recv(self, timeout: float = 15.0) -> dict[str, Any]:
        event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        return event

    async def until(self, type_: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        """Read events until one of ``type_`` (with fields equal to ``match``) arrives."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = await self.recv(max(0.01, deadline - loop.time()))
            if event["type"] == type_ and all(event.get(k) == v for k, v in match.items()):
                return event

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]
