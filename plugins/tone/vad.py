"""An energy voice activity detector over 20 ms frames.

A frame is voiced when its RMS reaches the start level; once speaking, frames
down to a lower stop level (hysteresis) still count, so a fading word does not
flicker. Speech starts only after ``min_speech_ms`` of consecutive voiced
frames (clicks are ignored) and stops after ``silence_duration_ms`` without one.
Times are the session's input clock: samples received since creation, which
``reset`` keeps.
"""

from __future__ import annotations

from duplex.config import TurnDetection
from plugins.base import Pcm, VadEvent
from plugins.tone.levels import Framer, frame_len, frame_powers, mean_square, threshold_dbfs

HYSTERESIS_DB = 6.0
MIN_SPEECH_MS = 60


class EnergyVad:
    def __init__(
        self,
        turn_detection: TurnDetection,
        rate: int = 24000,
        min_speech_ms: int = MIN_SPEECH_MS,
    ) -> None:
        self.rate = rate
        start_db = threshold_dbfs(turn_detection.threshold)
        self._start_power = mean_square(start_db)
        self._stop_power = mean_square(start_db - HYSTERESIS_DB)
        self._min_speech = min_speech_ms * rate // 1000
        self._silence = turn_detection.silence_duration_ms * rate // 1000
        self._framer = Framer(frame_len(rate))
        self._clock = 0  # samples received, never reset
        self.reset()

    def reset(self) -> None:
        """Forget speech in progress and any partial frame; the clock runs on."""
        self._framer.clear()
        self._speaking = False
        self._onset: int | None = None  # first sample of a run of voiced frames
        self._voiced_end = 0  # sample just after the last voiced frame

    @property
    def speaking(self) -> bool:
        return self._speaking

    def process(self, pcm: Pcm) -> list[VadEvent]:
        first = self._clock - self._framer.pending.size  # sample index of the next frame
        self._clock += pcm.size
        frames = self._framer.push(pcm)
        events: list[VadEvent] = []
        for i, power in enumerate(frame_powers(frames)):
            end = first + (i + 1) * self._framer.length
            event = self._frame(end - self._framer.length, end, float(power))
            if event is not None:
                events.append(event)
        return events

    def _frame(self, start: int, end: int, power: float) -> VadEvent | None:
        if self._speaking:
            return self._while_speaking(end, power)
        if power < self._start_power:
            self._onset = None
            return None
        if self._onset is None:
            self._onset = start
        if end - self._onset < self._min_speech:
            return None
        self._speaking = True
        self._voiced_end = end
        return VadEvent(started=True, audio_ms=self._ms(self._onset))

    def _while_speaking(self, end: int, power: float) -> VadEvent | None:
        if power >= self._stop_power:
            self._voiced_end = end
            return None
        if end - self._voiced_end < self._silence:
            return None
        self._speaking = False
        self._onset = None
        return VadEvent(started=False, audio_ms=self._ms(self._voiced_end))

    def _ms(self, sample: int) -> int:
        return sample * 1000 // self.rate
