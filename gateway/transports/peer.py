"""A WebRTC peer connection as a transport: frames in and out, and the two tracks.

``PeerFrames`` is what the shared loop (``gateway.transports.loop``) reads and
sends, as it reads a WebSocket: text frames are the ``oai-events`` data channel's
messages, and binary frames are the microphone track's audio, decoded from Opus
and resampled to the session's input format (``PeerAudio``), so it reaches the
session as a WebSocket's ``input_audio_buffer.append`` would, by the one input
route. Out, text goes on the data channel; the reply's audio goes to the
``ReplyTrack``, which plays it at real time, 20 ms a frame, and sends silence
between replies (the Opus encoder runs on what it takes).

This module imports aiortc (the ``webrtc`` extra); nothing else in the gateway
imports it until a call comes.
"""

from __future__ import annotations

import asyncio
import fractions
import logging

import av
from aiortc import MediaStreamTrack, RTCDataChannel, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError

from duplex.close_codes import CloseCode
from gateway.transports.codec import Frame
from gateway.transports.frames import Handle, Take
from gateway.transports.peer_audio import TRACK_RATE, PeerAudio, mono
from gateway.transports.speaker import FRAME_SAMPLES, Speaker

log = logging.getLogger(__name__)

MAX_LAG_S = 0.1  # the speaker track catches up this much at once, no more
MAX_QUEUED_FRAMES = 500  # 10 s of microphone audio the session has not taken yet
_TIME_BASE = fractions.Fraction(1, TRACK_RATE)


class ReplyTrack(MediaStreamTrack):
    """The speaker track: the reply's audio at real time, silence between replies."""

    kind = "audio"

    def __init__(self, speaker: Speaker) -> None:
        super().__init__()
        self.speaker = speaker
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self._start is None:
            self._start = loop.time()
        else:
            self._pts += FRAME_SAMPLES
            # pacing: the peer hears the reply as it is played, so what was played is
            # what was heard (the barge-in's truncate)
            wait = self._start + self._pts / TRACK_RATE - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -MAX_LAG_S:
                # a loop that fell behind starts the clock again rather than bursting
                # the backlog: the peer's jitter buffer drops what comes in a burst
                self._start -= wait
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(self.speaker.frame().tobytes())
        frame.pts = self._pts
        frame.sample_rate = TRACK_RATE
        frame.time_base = _TIME_BASE
        return frame


class PeerFrames:
    """One call's frames: the data channel's text, the microphone's audio."""

    def __init__(self, pc: RTCPeerConnection, audio: PeerAudio) -> None:
        self.pc = pc
        self.audio = audio
        self.channel: RTCDataChannel | None = None
        self.close_code = int(CloseCode.ABNORMAL)
        self.close_reason = ""
        self._inbox: asyncio.Queue[Frame | None] = asyncio.Queue()
        self._gone = False
        self.dropped = 0  # microphone frames dropped because the session fell behind

    @property
    def delivered(self) -> int:
        return 0  # every frame comes through ``receive``

    def use(self, channel: RTCDataChannel) -> None:
        """Events go over ``channel`` (``oai-events``) from now on."""
        self.channel = channel
        channel.on("message", self._message)
        channel.on("close", lambda: self.gone(CloseCode.ABNORMAL, "data channel closed"))

    def _message(self, message: str | bytes) -> None:
        if isinstance(message, str):
            self._put(message)
        # binary messages on the channel carry nothing of OpenAI's: audio is on the track

    def _put(self, frame: Frame) -> None:
        if not self._gone:
            self._inbox.put_nowait(frame)

    async def listen(self, track: MediaStreamTrack) -> None:
        """Read the microphone track into the frames until it ends."""
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if not isinstance(frame, av.AudioFrame):
                continue
            if self._inbox.qsize() >= MAX_QUEUED_FRAMES:
                self.dropped += 1
                continue
            pcm = mono(frame.to_ndarray(), len(frame.layout.channels))
            self._put(self.audio.mic(pcm))

    def gone(self, code: int, reason: str) -> None:
        """The peer hung up (``code`` 1000: the session ends) or dropped (it detaches)."""
        if self._gone:
            return
        self._gone = True
        self.close_code, self.close_reason = int(code), reason
        self._inbox.put_nowait(None)

    async def receive(self) -> Frame | None:
        return await self._inbox.get()

    async def pump(self, take: Take, handle: Handle) -> None:
        while (frame := await self.receive()) is not None:
            if not take(frame) and not await handle(frame):
                return

    async def send(self, frame: Frame) -> None:
        channel = self.channel
        if channel is None or channel.readyState != "open":
            raise ConnectionError("the oai-events data channel is closed")
        if isinstance(frame, str):
            channel.send(frame)

    async def close(self, code: int, reason: str = "") -> None:
        self.gone(code, reason)
        await self.pc.close()
