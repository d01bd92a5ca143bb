"""Which turn a piece of the tone plugin's speech answers (for tests)."""

from __future__ import annotations

import numpy as np

from plugins.base import Pcm
from plugins.tone.synth import BASE_HZ, STEP_HZ, TURN_CYCLE

SILENCE_DBFS = -50.0
_MIN_FFT = 8192  # zero-pad short chunks so the peak is located to a few Hz


def decode_turn(pcm: Pcm, rate: int) -> int | None:
    """``turn_id % 16`` of the reply this audio belongs to; None for silence.

    The spectral peak is mapped to the nearest tone of the 100 Hz grid; a peak
    off the grid (not our audio) also gives None.
    """
    x = pcm.astype(np.float64) / 32768.0
    if x.size == 0 or float(np.mean(x * x)) < 10.0 ** (SILENCE_DBFS / 10.0):
        return None
    n_fft = max(_MIN_FFT, 1 << (x.size - 1).bit_length())
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size), n_fft))
    spectrum[0] = 0.0  # ignore any DC offset
    peak_hz = float(np.argmax(spectrum)) * rate / n_fft
    index = round((peak_hz - BASE_HZ) / STEP_HZ)
    return index if 0 <= index < TURN_CYCLE else None
