"""The reply audio queued for a WebRTC speaker track, and what of it was played.

The gateway plays the reply on the track at real time (20 ms a frame), so what
was played is what the peer heard, give or take its jitter buffer: a barge-in
(``input_audio_buffer.speech_started``, or the client's ``output_audio_buffer.clear``)
drops what is still queued and truncates the reply's item to the milliseconds
played, as OpenAI does for WebRTC. Wall-clock time is never read here: the track
says when it took a frame. No I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from duplex import commands as c
from gateway.transports.peer_audio import TRACK_RATE
from plugins.base import Pcm

FRAME_SAMPLES = TRACK_RATE // 50  # 20 ms, Opus's usual frame
_SILENCE = np.zeros(FRAME_SAMPLES, dtype=np.int16)


@dataclass(slots=True)
class _Reply:
    response_id: str
    item_id: str
    played: int = 0  # samples taken by the track
    queued: deque[Pcm] = field(default_factory=deque)
    offset: int = 0  # samples of queued[0] already taken


def _nobody(response_id: str) -> None:
    pass


class Speaker:
    def __init__(self) -> None:
        self.reply: _Reply | None = None
        # told a reply's id when the track takes its first audio (its playback mark)
        self.on_played: Callable[[str], None] = _nobody

    def queue(self, response_id: str, item_id: str, pcm: Pcm) -> None:
        """More of a reply's audio, at 48 kHz; a new reply's replaces what is left of
        the last (its end was flushed on the way, or it was cut)."""
        if self.reply is None or self.reply.response_id != response_id:
            self.reply = _Reply(response_id, item_id)
        if pcm.size:
            self.reply.queued.append(pcm)

    def frame(self) -> Pcm:
        """The next 20 ms for the track: reply audio, padded with silence."""
        reply = self.reply
        if reply is None or not reply.queued:
            return _SILENCE
        parts, need = [], FRAME_SAMPLES
        while need and reply.queued:
            head = reply.queued[0]
            part = head[reply.offset:reply.offset + need]
            parts.append(part)
            need -= part.size
            reply.offset += part.size
            if reply.offset >= head.size:
                reply.queued.popleft()
                reply.offset = 0
        if not reply.played:
            self.on_played(reply.response_id)
        reply.played += FRAME_SAMPLES - need
        if need:
            parts.append(_SILENCE[:need])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    @property
    def playing(self) -> bool:
        return self.reply is not None and bool(self.reply.queued)

    def barge_in(self) -> c.TruncateItem | None:
        """Drop the reply's unplayed audio: the truncate to what was played, or None
        when nothing of it was still queued (it had all been heard)."""
        reply = self.reply
        if reply is None or not reply.queued:
            return None
        reply.queued.clear()
        reply.offset = 0
        return c.TruncateItem(None, reply.item_id, 0, reply.played * 1000 // TRACK_RATE)
