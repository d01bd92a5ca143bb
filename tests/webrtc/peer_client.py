"""An aiortc client of ``/v1/realtime/calls``, as a browser app would call it.

It makes the offer a browser makes (a microphone track and the ``oai-events``
data channel, created before the offer), POSTs it, and then speaks through a
paced microphone track and hears the reply's audio on the gateway's track. The
events it receives on the channel are kept in order, as ``RealtimeClient`` keeps
a WebSocket's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from gateway.audio import resample
from gateway.transports.peer import ReplyTrack
from gateway.transports.peer_audio import TRACK_RATE, mono
from gateway.transports.speaker import Speaker

calls_made: list[PeerClient] = []  # this test's calls, whose events conftest checks


async def offer() -> tuple[RTCPeerConnection, RTCDataChannel, Speaker]:
    """A peer connection with its offer made: a microphone (fed by the returned
    ``Speaker``, which paces it) and the ``oai-events`` channel."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    mic = Speaker()
    pc.addTrack(ReplyTrack(mic))
    channel = pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, channel, mic


class PeerClient:
    def __init__(self, pc: RTCPeerConnection, channel: RTCDataChannel, mic: Speaker,
                 call_url: str) -> None:
        self.pc, self.channel, self.mic = pc, channel, mic
        self.call_url = call_url
        self.events: list[dict[str, Any]] = []
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.heard: list[np.ndarray] = []  # the gateway's track, 20 ms frames at 48 kHz
        self.heard_by: list[int] = []  # for each event, the frames heard when it came
        self._listening: asyncio.Task[None] | None = None
        self.opened = asyncio.Event()
        channel.on("message", self._message)
        channel.on("open", self.opened.set)
        pc.on("track", self._track)

    @classmethod
    async def call(cls, base: str, *, headers: dict[str, str] | None = None,
                   session: dict[str, Any] | None = None, query: str = "") -> PeerClient:
        pc, channel, mic = await offer()
        sdp = pc.localDescription.sdp
        async with httpx.AsyncClient(base_url=base, timeout=30.0) as http:
            if session is None:
                answer = await http.post(f"/v1/realtime/calls{query}", content=sdp,
                                         headers={"Content-Type": "application/sdp",
                                                  **(headers or {})})
            else:
                answer = await http.post(f"/v1/realtime/calls{query}", headers=headers,
                                         files={"sdp": (None, sdp),
                                                "session": (None, json.dumps(session))})
        assert answer.status_code == 201, answer.text
        assert answer.headers["content-type"].startswith("application/sdp")
        client = cls(pc, channel, mic, base + answer.headers["location"])
        calls_made.append(client)
        await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        await asyncio.wait_for(client.opened.wait(), 30)
        return client

    def _message(self, message: str | bytes) -> None:
        event = json.loads(message)
        self.events.append(event)
        self.heard_by.append(len(self.heard))
        self._queue.put_nowait(event)

    def _track(self, track: MediaStreamTrack) -> None:
        self._listening = asyncio.ensure_future(self._listen(track))

    async def _listen(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.heard.append(mono(frame.to_ndarray(), len(frame.layout.channels)))

    def speak(self, pcm24k: np.ndarray) -> None:
        """Say ``pcm24k`` (24 kHz) into the microphone, at real time."""
        self.mic.queue("mic", "mic", resample(pcm24k.astype(np.int16), 24000, TRACK_RATE))

    def send(self, type_: str, **fields: Any) -> None:
        self.channel.send(json.dumps({"type": type_, **fields}))

    async def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        return await asyncio.wait_for(self._queue.get(), timeout)

    async def until(self, type_: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        async def find() -> dict[str, Any]:
            while True:
                event = await self._queue.get()
                if event["type"] == type_ and all(event.get(k) == v for k, v in match.items()):
                    return event
        return await asyncio.wait_for(find(), timeout)

    def frames_by(self, event: dict[str, Any]) -> int:
        """The frames heard on the track when ``event`` arrived."""
        return self.heard_by[next(i for i, e in enumerate(self.events) if e is event)]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]

    def heard_since(self, frame: int) -> np.ndarray:
        chunks = self.heard[frame:]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    async def hang_up(self, headers: dict[str, str] | None = None) -> int:
        async with httpx.AsyncClient(timeout=30.0) as http:
            status = (await http.delete(self.call_url, headers=headers)).status_code
        await self.close()
        return status

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
        await self.pc.close()
