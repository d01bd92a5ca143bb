"""A session's audio in and out: wire format ⇄ the plugin's PCM rates.

Resampler state carries across chunks, so a stream of 20 ms appends resamples
like one long signal (no clicks at chunk edges).
"""

from __future__ import annotations

from duplex.config import AudioFormat
from gateway.audio import StreamResampler, from_wire, to_wire
from plugins.base import Pcm

# soxr's "quick" quality returns output for every chunk; the default HQ filter
# holds ~60 ms back, which would delay reply ends and leak past a cancel.
QUALITY = "QQ"


class AudioIO:
    def __init__(self, input_rate: int, output_rate: int) -> None:
        self.input_rate = input_rate
        self.output_rate = output_rate
        self.input_format: AudioFormat | None = None
        self.output_format: AudioFormat | None = None
        self._in = StreamResampler(AudioFormat.PCM16.rate, input_rate, QUALITY)
        self._out = StreamResampler(output_rate, AudioFormat.PCM16.rate, QUALITY)

    def configure(self, input_format: AudioFormat, output_format: AudioFormat) -> None:
        if input_format != self.input_format:
            self.input_format = input_format
            self._in = StreamResampler(input_format.rate, self.input_rate, QUALITY)
        if output_format != self.output_format:
            self.output_format = output_format
            self._out = StreamResampler(self.output_rate, output_format.rate, QUALITY)

    def decode(self, data: bytes) -> Pcm:
        """Client audio in the session's input format → PCM at the plugin's rate."""
        assert self.input_format is not None
        return self._in.process(from_wire(data, self.input_format))

    def encode(self, pcm: Pcm) -> bytes:
        """Plugin PCM → bytes in the session's output format."""
        assert self.output_format is not None
        return to_wire(self._out.process(pcm), self.output_format)

    def reset_output(self) -> None:
        """Drop what the output filter holds (a cancel: none of it may be sent)."""
        self._out = StreamResampler(self.output_rate, self._out.out_rate, QUALITY)
