"""What every emulated carrier does with our audio: play it at real time, and say so.

A carrier buffers the media we send and plays it in order, at real time; when
it reaches a named point we put after a chunk (Twilio, Telnyx and Exotel: a
``mark``; Plivo: a ``checkpoint``; Vonage: a ``notify``) it acknowledges it. On
a clear it drops what is buffered: Twilio, Telnyx and Exotel then acknowledge
the pending points at once, Plivo and Vonage never do (they acknowledge a point
only once what came before it has been played). ``Playout`` is that buffer, the
one every emulator uses; an emulator feeds it what it reads and gives it the
carrier's way of acknowledging. ``CarrierSocket`` is what every emulator does
alike with its end of the media socket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection

Ack = Callable[[str], Awaitable[None]]


class Playout:
    """One stream's playback buffer at the carrier."""

    def __init__(self, ack: Ack, bytes_per_ms: float, *, acks_flushed: bool) -> None:
        self.ack = ack  # sends the carrier's acknowledgement of a point
        self.bytes_per_ms = bytes_per_ms
        self.acks_flushed = acks_flushed  # a clear acknowledges the pending points
        self.audio = bytearray()  # every byte of audio we sent
        self.chunk_sizes: list[int] = []  # of each audio message, as sent
        self.sent: list[str] = []  # the points we named, in order
        self.played: list[str] = []  # acknowledged after playing
        self.flushed: list[str] = []  # dropped by a clear (acknowledged or not)
        self.played_before_clear: list[str] | None = None  # played when the 1st clear came
        self.clears = 0
        self.changed = asyncio.Condition()
        self._buffer: deque[tuple[str, Any]] = deque()
        self._flush = asyncio.Event()

    async def audio_in(self, data: bytes) -> None:
        self.audio += data
        self.chunk_sizes.append(len(data))
        self._buffer.append(("audio", len(data) / self.bytes_per_ms))
        await self.notify()

    async def point_in(self, name: str) -> None:
        self.sent.append(name)
        self._buffer.append(("point", name))
        await self.notify()

    async def clear(self) -> None:
        self.clears += 1
        if self.played_before_clear is None:
            self.played_before_clear = list(self.played)
        pending = [v for k, v in self._buffer if k == "point"]
        self._buffer.clear()
        self._flush.set()
        self.flushed += pending
        if self.acks_flushed:
            for name in pending:
                await self.ack(name)
        await self.notify()

    async def play(self) -> None:
        """Play forever (a task): real time, cut short by a clear."""
        while True:
            async with self.changed:
                await self.changed.wait_for(lambda: bool(self._buffer))
            kind, value = self._buffer.popleft()
            if kind == "audio":
                self._flush.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush.wait(), value / 1000.0)
                continue
            self.played.append(value)
            await self.ack(value)
            await self.notify()

    async def notify(self) -> None:
        """Wake whoever waits in ``until`` (an emulator calls it for what it reads too)."""
        async with self.changed:
            self.changed.notify_all()

    # -- what the tests wait on and read -------------------------------------------------

    async def until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout)

    def played_ms(self) -> float:
        """How far into its reply the last acknowledged point is."""
        return point_ms(self.played[-1]) if self.played else 0.0

    def response_ids(self) -> list[str]:
        seen: list[str] = []
        for name in self.sent:
            rid = name.rpartition(":")[0]
            if rid not in seen:
                seen.append(rid)
        return seen

    def points_of(self, response_id: str) -> list[str]:
        return [n for n in self.sent if n.rpartition(":")[0] == response_id]

    async def heard(self, turn: int, ms: float) -> str:
        """Wait until ``ms`` of the reply to ``turn`` has played; its response id."""
        await self.until(lambda: len(self.response_ids()) >= turn)
        rid = self.response_ids()[turn - 1]
        await self.until(lambda: any(point_ms(n) >= ms - 1 for n in self.played
                                     if n.startswith(rid + ":")))
        return rid


class CarrierSocket(ABC):
    """The carrier's end of a call's media socket, as every emulator keeps it: a task
    reading what the gateway sends and one playing its audio, the caller's voice
    paced from the start, and the two ways the socket ends (closed, or dropped)."""

    ws: ClientConnection
    playout: Playout
    started_at: float  # when the stream started: the caller's voice is paced from it
    _tasks: list[asyncio.Task[None]]

    def _serve(self) -> None:
        """The stream started: read the gateway's messages and play its audio."""
        self._tasks = [asyncio.create_task(self._read()),
                       asyncio.create_task(self.playout.play())]

    @abstractmethod
    async def _read(self) -> None:
        """The gateway's messages, until the socket closes."""

    async def _pace(self, at_ms: float) -> None:
        """Wait until ``at_ms`` after the start: the caller speaks at real time."""
        delay = self.started_at + at_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the caller's voice, not syncing

    async def _play(self, msg: dict[str, Any]) -> None:
        """A message of the media-stream protocol Twilio set (Telnyx and Exotel follow
        it): ``media`` audio is buffered, a ``mark`` is a playback point, a ``clear``
        drops what is buffered."""
        match msg["event"]:
            case "media":
                await self.playout.audio_in(base64.b64decode(msg["media"]["payload"]))
            case "mark":
                await self.playout.point_in(msg["mark"]["name"])
            case "clear":
                await self.playout.clear()

    def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def close(self, code: int = 1000) -> None:
        self._stop_tasks()
        with contextlib.suppress(Exception):
            await self.ws.close(code)

    async def drop(self) -> None:
        """The socket dies without a close frame (a network fault)."""
        self._stop_tasks()
        self.ws.transport.abort()


def point_ms(name: str) -> float:
    return float(name.rpartition(":")[2])


def pcm_tone(seconds: float, rate: int, freq: float = 440.0, amplitude: float = 0.3) -> bytes:
    """A tone as 16-bit little-endian PCM (what the L16 carriers' callers say)."""
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype("<i2").tobytes()


def pcm_silence(seconds: float, rate: int) -> bytes:
    return bytes(2 * int(rate * seconds))
