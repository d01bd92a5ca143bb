"""Where one reply's wait went, as one record (``TurnSplit``).

A person waits from the last voiced sample of their turn to the first sound of
the reply ("mouth to ear"). The server sees all of that wait but the network's
share, in two parts: the turn detector's wait (from the end of speech, the
``audio_end_ms`` of ``input_audio_buffer.speech_stopped``, to its decision that
the turn is over: the silence window, on the input's clock), then the reply's
own time from that decision to its first audio, with the steps in between
(transcript, each timed stage's first output). ``response.done`` carries the
same numbers as ``timings_ms`` (an extension OpenAI clients ignore); ``/metrics``
has them as ``duplex_turn_phase_seconds``. One flat record, so a trace
exporter can take it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

TURN_DETECTION = "turn_detection"
TRANSCRIBE = "transcribe"
FIRST_AUDIO = "first_audio"
PLAYBACK_MARK = "playback_mark"  # after the split: the client's first report of playing


@dataclass(frozen=True, slots=True)
class TurnSplit:
    """One reply's split, in ms: ``turn_detection_ms`` (end of speech → the turn's
    end decided; None when no VAD ended the turn: a client commit, a
    ``response.create``), then from that decision to each step (``steps``:
    ``transcribe`` and the plugin's ``reply_timings`` names) and to the first
    reply audio sent (``first_audio_ms``)."""

    first_audio_ms: float
    turn_detection_ms: float | None = None
    steps: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def heard_to_sent_ms(self) -> float | None:
        """End of speech → first reply audio sent: the server's part of the wait
        (the client adds its network and playback)."""
        if self.turn_detection_ms is None:
            return None
        return self.turn_detection_ms + self.first_audio_ms

    def phases(self) -> dict[str, float]:
        """Every measured phase by name, seconds (for histograms, spans)."""
        out = {} if self.turn_detection_ms is None else {
            TURN_DETECTION: self.turn_detection_ms / 1000}
        out.update({name: ms / 1000 for name, ms in self.steps.items()})
        out[FIRST_AUDIO] = self.first_audio_ms / 1000
        return out
