"""An energy voice activity detector over 20 ms frames.

A frame's score is its mean square; ``plugins.segmenter`` turns scores into
speech start/stop events (a start level from ``threshold``, a stop level
``HYSTERESIS_DB`` below it) and ends turns as ``plugins.turn_end`` says, with
the pitch of the last voiced frame as the words so far
(``plugins.tone.words``). Times are the session's input clock: samples
received since creation, which ``reset`` keeps.
"""

from __future__ import annotations

from duplex.config import TurnDetection
from plugins.base import Pcm, VadEvent
from plugins.segmenter import SpeechSegmenter
from plugins.tone.levels import Framer, frame_len, frame_power, mean_square, threshold_dbfs
from plugins.tone.words import PitchWords
from plugins.turn_end import TurnEnd

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
        self.words = PitchWords(rate)
        self._segmenter = SpeechSegmenter(
            rate, start_level=mean_square(start_db),
            stop_level=mean_square(start_db - HYSTERESIS_DB),
            min_speech=min_speech_ms * rate // 1000,
            turn_end=TurnEnd.of(turn_detection), words=self.words)
        self._framer = Framer(frame_len(rate))
        self._clock = 0  # samples received, never reset
        self.reset()

    def reset(self) -> None:
        """Forget speech in progress and any partial frame; the clock runs on."""
        self._framer.clear()
        self._segmenter.reset()
        self.words.forget()

    @property
    def speaking(self) -> bool:
        return self._segmenter.speaking

    def process(self, pcm: Pcm) -> list[VadEvent]:
        """Runs on every append (50 a second a session): each frame's energy is
        one dot product; the last voiced frame's pitch is measured when asked."""
        end = self._clock - self._framer.pending.size  # sample index of the next frame
        self._clock += pcm.size
        events: list[VadEvent] = []
        segmenter, length = self._segmenter, self._framer.length
        # the usual append is one whole frame: taken as it is, not cut into rows
        frames = ((pcm,) if pcm.size == length and not self._framer.pending.size
                  else self._framer.push(pcm))
        for frame in frames:
            start, end = end, end + length
            power = frame_power(frame)
            if power >= segmenter.stop_level:  # a voiced frame: its pitch is the latest word
                self.words.heard(frame)
            event = segmenter.frame(start, end, power)
            if event is not None:
                events.append(event)
                if not event.started:
                    self.words.forget()  # the next turn starts with no words
        return events
