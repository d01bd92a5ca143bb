"""A session's audio: wire format ⇄ the plugin's PCM rates, and the VAD that hears
the user.

Resampler state carries across chunks, so a stream of 20 ms appends resamples
like one long signal (no clicks at chunk edges).
"""

from __future__ import annotations

from duplex.config import AudioFormat, SessionConfig, TurnDetection
from gateway.audio import StreamResampler, from_wire, to_wire
from plugins import base as pb

# soxr's "quick" quality returns output for every chunk; the default HQ filter
# holds ~60 ms back, which would delay reply ends and leak past a cancel.
QUALITY = "QQ"


class SessionAudio:
    def __init__(self, plugin: pb.DuplexModelPlugin) -> None:
        caps = plugin.capabilities
        self._plugin = plugin
        self.input_rate = caps.input_rate
        self.output_rate = caps.output_rate
        self.input_format: AudioFormat | None = None
        self.output_format: AudioFormat | None = None
        self._in = StreamResampler(AudioFormat.PCM16.rate, self.input_rate, QUALITY)
        self._in_identity = self._in.identity  # the input is at the plugin's rate already
        self._out = StreamResampler(self.output_rate, AudioFormat.PCM16.rate, QUALITY)
        self.vad: pb.VoiceActivityDetector | None = None
        self._turn_detection: TurnDetection | None = None
        self._vad_samples = 0  # fed to this VAD: its clock, which its events are on

    def configure(self, config: SessionConfig) -> None:
        """Follow the session's formats and turn detection (a new VAD if it changed)."""
        if config.input_format != self.input_format:
            self.input_format = config.input_format
            self._in = StreamResampler(config.input_format.rate, self.input_rate, QUALITY)
            self._in_identity = self._in.identity
        if config.output_format != self.output_format:
            self.output_format = config.output_format
            self._out = StreamResampler(self.output_rate, config.output_format.rate, QUALITY)
        if self.vad is None or config.turn_detection != self._turn_detection:
            self._turn_detection = config.turn_detection
            self.vad = (self._plugin.create_vad(config.turn_detection)
                        if config.turn_detection is not None else None)
            self._vad_samples = 0

    def decode(self, data: bytes) -> pb.Pcm:
        """Client audio in the session's input format → PCM at the plugin's rate."""
        assert self.input_format is not None
        pcm = from_wire(data, self.input_format)
        # no resampler call when the rates agree (50 appends a second a session)
        return pcm if self._in_identity else self._in.process(pcm)

    def hear(self, pcm: pb.Pcm) -> tuple[pb.VadEvent, ...]:
        """What the VAD makes of the user's ``pcm``: speech starts and stops."""
        if self.vad is None:
            return ()
        self._vad_samples += len(pcm)
        return tuple(self.vad.process(pcm))

    def waited_ms(self, stop: pb.VadEvent) -> float:
        """How long the VAD listened past ``stop``'s end of speech before it said
        so (its silence window, on the input's clock): the turn detector's share of
        the wait, as long in wall time when the audio comes at real time."""
        return max(0.0, 1000.0 * self._vad_samples / self.input_rate - stop.audio_ms)

    def hear_words(self, words: str) -> tuple[pb.VadEvent, ...]:
        """What the VAD makes of the words so far of the turn in progress (a
        plugin's ``WordsHeard``): a speech stop they decide at once, if any."""
        vad = self.vad
        return tuple(vad.hear_words(words)) if isinstance(vad, pb.HearsWords) else ()

    def encode(self, pcm: pb.Pcm) -> bytes:
        """Plugin PCM → bytes in the session's output format."""
        assert self.output_format is not None
        return to_wire(self._out.process(pcm), self.output_format)

    def reset_output(self) -> None:
        """Drop what the output filter holds (a cancel: none of it may be sent)."""
        self._out = StreamResampler(self.output_rate, self._out.out_rate, QUALITY)
