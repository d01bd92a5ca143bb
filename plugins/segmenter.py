"""Speech segmentation with hysteresis, shared by every VAD.

A VAD scores fixed frames (energy, a model's probability …); this turns the
scores into speech start/stop events on the session's input clock:

- a frame scoring at least ``start_level`` is voiced; once speaking, frames
  down to the lower ``stop_level`` still count, so a fading word does not flicker;
- speech starts after ``min_speech`` samples of consecutive voiced frames
  (clicks are ignored), dated at the first of them;
- it stops after a window of silence, dated at the end of the last voiced
  frame. ``plugins.turn_end`` decides the window: fixed for ``server_vad``;
  for ``semantic_vad`` from the eagerness and, when the VAD has a
  ``WordsSoFar``, the words so far, asked again on every silent frame (a
  partial transcript may arrive during the pause), and once more when they
  change between frames (``words_changed``): words that arrive after the
  shorter window they call for has passed end the turn then and there.
"""

from __future__ import annotations

from dataclasses import dataclass

from plugins.base import VadEvent, WordsSoFar
from plugins.turn_end import TurnEnd


@dataclass(slots=True)
class HeardWords:
    """``WordsSoFar`` told from outside the VAD: the words a plugin's listener
    drafted at a pause (``plugins.base.WordsHeard``), kept until withdrawn ("")
    or forgotten when a turn starts or ends."""

    text: str = ""

    def words_so_far(self) -> str:
        return self.text


@dataclass(slots=True)
class SpeechSegmenter:
    rate: int
    start_level: float
    stop_level: float
    min_speech: int  # samples
    turn_end: TurnEnd
    words: WordsSoFar | None = None
    speaking: bool = False
    _onset: int | None = None  # first sample of a run of voiced frames
    _voiced_end: int = 0  # sample just after the last voiced frame
    _heard_end: int = 0  # sample just after the last frame fed

    def reset(self) -> None:
        """Forget speech in progress (the caller's clock runs on)."""
        self.speaking = False
        self._onset = None

    def silence(self) -> int:
        """Samples of silence that end the turn in progress, as of now."""
        words = self.words.words_so_far() if self.words is not None else ""
        return self.turn_end.window_ms(words) * self.rate // 1000

    def frame(self, start: int, end: int, score: float) -> VadEvent | None:
        """Feed the frame ``[start, end)`` of the session clock and its score."""
        self._heard_end = end
        if self.speaking:
            if score >= self.stop_level:
                self._voiced_end = end
                return None
            if end - self._voiced_end < self.silence():
                return None
            return self._stop()
        if score < self.start_level:
            self._onset = None
            return None
        if self._onset is None:
            self._onset = start
        if end - self._onset < self.min_speech:
            return None
        self.speaking = True
        self._voiced_end = end
        return VadEvent(started=True, audio_ms=self._ms(self._onset))

    def words_changed(self) -> VadEvent | None:
        """The words so far changed between frames: the stop, if the silence
        heard since the last voiced frame is already past the window they call for."""
        if not self.speaking or self._heard_end - self._voiced_end < max(1, self.silence()):
            return None
        return self._stop()

    def _stop(self) -> VadEvent:
        self.speaking = False
        self._onset = None
        return VadEvent(started=False, audio_ms=self._ms(self._voiced_end))

    def _ms(self, sample: int) -> int:
        return sample * 1000 // self.rate
