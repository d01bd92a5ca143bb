"""A WebRTC call's audio, between the Opus tracks (48 kHz) and the session's formats.

The microphone track's decoded frames become the bytes a WebSocket client would
put in ``input_audio_buffer.append`` (the session's input format); the reply's
``response.output_audio.delta`` bytes (its output format) become 48 kHz PCM for
the speaker track. The formats follow the session's own ``session.created`` and
``session.updated`` events, so a ``session.update`` to G.711 changes what is
resampled to, not what the tracks carry. Resampler state carries across frames.
No I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from duplex.config import AudioFormat
from gateway.audio import StreamResampler, from_wire, to_wire
from plugins.base import Pcm

TRACK_RATE = 48000  # Opus in WebRTC: 48 kHz, whatever the peer's device rate
QUALITY = "QQ"  # every chunk out at once: a filter's hold-back would delay each turn


class PeerAudio:
    def __init__(self) -> None:
        self.input_format = AudioFormat.PCM16
        self.output_format = AudioFormat.PCM16
        self._mic = StreamResampler(TRACK_RATE, self.input_format.rate, QUALITY)
        self._reply = StreamResampler(self.output_format.rate, TRACK_RATE, QUALITY)

    def follow(self, session: Any) -> None:
        """Take the formats of a ``session`` object as a GA server event carries it."""
        audio = session.get("audio") if isinstance(session, dict) else None
        if not isinstance(audio, dict):
            return
        fin, fout = _format(audio.get("input")), _format(audio.get("output"))
        if fin is not None and fin is not self.input_format:
            self.input_format = fin
            self._mic = StreamResampler(TRACK_RATE, fin.rate, QUALITY)
        if fout is not None and fout is not self.output_format:
            self.output_format = fout
            self._reply = StreamResampler(fout.rate, TRACK_RATE, QUALITY)

    def mic(self, pcm: Pcm) -> bytes:
        """48 kHz mono PCM from the track → the session's input bytes."""
        return to_wire(self._mic.process(pcm), self.input_format)

    def reply(self, data: bytes) -> Pcm:
        """Reply audio in the session's output format → 48 kHz PCM for the track."""
        return self._reply.process(from_wire(data, self.output_format))

    def reply_ended(self) -> Pcm:
        """The reply's audio ended or was cut: what the filter still held (its tail,
        for a reply that ended), and the next reply starts a fresh filter."""
        return self._reply.flush()


def _format(direction: Any) -> AudioFormat | None:
    fmt = direction.get("format") if isinstance(direction, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    try:
        return AudioFormat(kind) if isinstance(kind, str) else None
    except ValueError:
        return None


def mono(samples: np.ndarray, channels: int) -> Pcm:
    """An interleaved int16 frame's first channel (the track's audio is mono in fact)."""
    flat = samples.reshape(-1)
    return np.ascontiguousarray(flat[::channels] if channels > 1 else flat, dtype=np.int16)
