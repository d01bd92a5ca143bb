"""The tone plugin's words so far: its users "speak" in pitch.

The tone plugin has no recogniser, so its VAD gives the end-of-turn decision
(``plugins.turn_end``) a deterministic stand-in for a partial transcript: the
pitch of the last voiced 20 ms frame names the last word, by band:

- below ``LOW_HZ`` (a low, level tone): ``"and"``, a turn that goes on;
- above ``HIGH_HZ`` (a high tone): ``"that is all."``, a finished one;
- in between (the 440 Hz of most tests): ``"tone"``, which says nothing either way.

Pitch is measured by zero crossings (a sine at f Hz crosses zero 2f times a
second), exact enough for bands this wide and cheap enough for every frame.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

LOW_HZ = 250.0
HIGH_HZ = 1500.0
UNFINISHED, NEUTRAL, FINISHED = "and", "tone", "that is all."


def pitch(frame: npt.NDArray[np.int16], rate: int) -> float:
    """The zero-crossing pitch of one frame, in Hz."""
    signs = np.signbit(frame)
    return int(np.count_nonzero(signs[1:] != signs[:-1])) * rate / (2.0 * frame.size)


def word_for(pitch_hz: float) -> str:
    if pitch_hz < LOW_HZ:
        return UNFINISHED
    return FINISHED if pitch_hz > HIGH_HZ else NEUTRAL


class PitchWords:
    """``WordsSoFar`` for one session: the word of the last voiced frame, whose
    pitch is measured only when asked (once a turn, in its pause: for most frames
    nobody asks)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.last = ""
        self._unmeasured: npt.NDArray[np.int16] | None = None

    def heard(self, frame: npt.NDArray[np.int16]) -> None:
        """A voiced frame (kept, not copied: the caller's audio is never rewritten)."""
        self._unmeasured = frame

    def forget(self) -> None:
        self.last = ""
        self._unmeasured = None

    def words_so_far(self) -> str:
        if self._unmeasured is not None:
            self.last = word_for(pitch(self._unmeasured, self.rate))
            self._unmeasured = None
        return self.last
