"""Frame energy: the one measurement both the VAD and the listener make."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from plugins.base import Pcm

FRAME_MS = 20
_FULL_SCALE = 32768.0


def frame_len(rate: int) -> int:
    return rate * FRAME_MS // 1000


def threshold_dbfs(threshold: float) -> float:
    """Map OpenAI's ``turn_detection.threshold`` (0..1) onto a speech level.

    Linear in dB from -70 dBFS (0.0) to -10 dBFS (1.0): the default 0.5 is
    -40 dBFS, far below a 0.3 full-scale tone (-13.5 dBFS RMS) and far above
    digital silence or -60 dBFS noise.
    """
    return -70.0 + 60.0 * min(max(threshold, 0.0), 1.0)


def mean_square(dbfs: float) -> float:
    """The mean square (of samples scaled to ±1) that an RMS level of ``dbfs`` has."""
    return float(10.0 ** (dbfs / 10.0))


def frame_powers(frames: npt.NDArray[np.int16]) -> npt.NDArray[np.float64]:
    """Mean square of each row of ``frames`` (shape frames × samples), full scale = 1."""
    scaled = frames.astype(np.float64) / _FULL_SCALE
    return np.asarray(np.mean(scaled * scaled, axis=-1), dtype=np.float64)


class Framer:
    """Cuts a stream of chunks of any length into whole frames, keeping the rest."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.pending: Pcm = np.zeros(0, dtype=np.int16)

    def push(self, pcm: Pcm) -> npt.NDArray[np.int16]:
        """Append ``pcm``; return the complete frames now available, one per row."""
        data = np.concatenate((self.pending, pcm.astype(np.int16, copy=False)))
        whole = data.size - data.size % self.length
        self.pending = data[whole:]
        return data[:whole].reshape(-1, self.length)

    def clear(self) -> None:
        self.pending = np.zeros(0, dtype=np.int16)
