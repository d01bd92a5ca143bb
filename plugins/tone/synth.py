"""The voice: each word is a short sine tone whose pitch names the turn."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from plugins.base import Pcm

WORD_MS = 200
FADE_MS = 5  # ramps at both ends: a tone cut mid-cycle clicks
AMPLITUDE = 0.3  # of full scale
BASE_HZ, STEP_HZ, TURN_CYCLE = 300, 100, 16


def turn_freq(turn_id: int) -> int:
    """Pitch of the reply to ``turn_id``: 300 Hz … 1800 Hz, repeating every 16 turns."""
    return BASE_HZ + STEP_HZ * (turn_id % TURN_CYCLE)


def word_tone(turn_id: int, rate: int) -> Pcm:
    """One word of audio for ``turn_id`` (shared and read-only: callers must not mutate)."""
    return _tone(turn_freq(turn_id), rate)


@lru_cache(maxsize=64)
def _tone(freq_hz: int, rate: int) -> Pcm:
    n = rate * WORD_MS // 1000
    t = np.arange(n, dtype=np.float64) / rate
    wave = AMPLITUDE * np.sin(2.0 * np.pi * freq_hz * t)
    fade = rate * FADE_MS // 1000
    ramp = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, fade))  # raised cosine, 0 → 1
    wave[:fade] *= ramp
    wave[n - fade :] *= ramp[::-1]
    pcm = np.round(wave * 32767.0).astype(np.int16)
    pcm.flags.writeable = False
    return pcm
