"""A carrier's side of reply playback, for the emulators of carriers that speak raw
PCM: it buffers what the gateway sends, "plays" it at real time, acknowledges each
playback point (Exotel's ``mark``, Vonage's ``notify``) once the audio before it has
played, and on a clear drops what is buffered (and, where the carrier documents it,
acknowledges the pending points at once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

Ack = Callable[[str], Awaitable[None]]


class CarrierPlayout:
    def __init__(self, bytes_per_ms: float, ack: Ack, *, acks_pending_on_clear: bool) -> None:
        self.bytes_per_ms = bytes_per_ms
        self._ack = ack
        self.acks_pending_on_clear = acks_pending_on_clear
        self.audio = bytearray()  # every chunk received
        self.chunk_sizes: list[int] = []
        self.points: list[str] = []  # every playback point received, in order
        self.played: list[str] = []  # acknowledged after playing
        self.flushed: list[str] = []  # acknowledged because of a clear
        self.played_before_clear: list[str] | None = None  # ``played`` at the 1st clear
        self.clears = 0
        self.changed = asyncio.Condition()
        self._buffer: deque[tuple[str, Any]] = deque()
        self._flush = asyncio.Event()

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def audio_in(self, chunk: bytes) -> None:
        self.audio += chunk
        self.chunk_sizes.append(len(chunk))
        self._buffer.append(("audio", len(chunk) / self.bytes_per_ms))

    def point_in(self, name: str) -> None:
        self.points.append(name)
        self._buffer.append(("point", name))

    async def clear(self) -> None:
        self.clears += 1
        if self.played_before_clear is None:
            self.played_before_clear = list(self.played)
        pending = [v for k, v in self._buffer if k == "point"]
        self._buffer.clear()
        self._flush.set()
        if self.acks_pending_on_clear:
            for name in pending:
                self.flushed.append(name)
                await self._ack(name)

    async def play(self) -> None:
        while True:
            async with self.changed:
                await self.changed.wait_for(lambda: bool(self._buffer))
            kind, value = self._buffer.popleft()
            if kind == "audio":
                self._flush.clear()
                # "playing": real time, cut short by a clear
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush.wait(), value / 1000.0)
                continue
            self.played.append(value)
            await self._ack(value)
            await self.notify()

    async def until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout)

    def played_ms(self) -> float:
        return point_ms(self.played[-1]) if self.played else 0.0

    def points_of(self, response_id: str) -> list[str]:
        return [n for n in self.points if n.rpartition(":")[0] == response_id]

    def response_ids(self) -> list[str]:
        return list(dict.fromkeys(n.rpartition(":")[0] for n in self.points))

    def pcm(self) -> np.ndarray:
        return np.frombuffer(bytes(self.audio), dtype="<i2").astype(np.int16)

    async def heard(self, turn: int, ms: float) -> str:
        """Wait until ``ms`` of the reply to ``turn`` has played; its response id."""
        await self.until(lambda: len(self.response_ids()) >= turn)
        rid = self.response_ids()[turn - 1]
        await self.until(lambda: any(point_ms(n) >= ms - 1 for n in self.played
                                     if n.startswith(rid + ":")))
        return rid


def point_ms(name: str) -> float:
    return float(name.rpartition(":")[2])


def pcm_tone(seconds: float, rate: int, freq: float = 440.0, amplitude: float = 0.3) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype("<i2").tobytes()


def pcm_silence(seconds: float, rate: int) -> bytes:
    return bytes(2 * int(rate * seconds))
