"""Where the speaker stopped, found by ``duplex-gateway call`` in the audio it sends
(the start of the mouth-to-ear clock)."""

from __future__ import annotations

import numpy as np

from gateway.call_audio import RATE, last_voiced


def tone(seconds: float, amplitude: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)


def test_the_end_is_the_last_voiced_frame_not_the_files_end() -> None:
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), tone(1.0, 0.3),
                          np.zeros(RATE, np.int16)])
    assert last_voiced(pcm) == RATE // 2 + RATE  # on a 10 ms frame boundary here


def test_a_quiet_tail_and_background_noise_are_not_speech() -> None:
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(RATE) * 0.002 * 32768).astype(np.int16)  # about -54 dBFS
    fading = tone(0.2, 0.3 * 10 ** (-45 / 20))  # 45 dB under the words: a breath, not speech
    pcm = np.concatenate([tone(0.5, 0.3), fading, noise])
    assert last_voiced(pcm) == RATE // 2


def test_a_soft_last_word_still_counts() -> None:
    pcm = np.concatenate([tone(0.5, 0.5), np.zeros(RATE // 5, np.int16),
                          tone(0.3, 0.5 * 10 ** (-20 / 20)), np.zeros(RATE // 2, np.int16)])
    assert last_voiced(pcm) == RATE // 2 + RATE // 5 + int(RATE * 0.3)


def test_silence_and_too_little_audio_have_no_end() -> None:
    assert last_voiced(np.zeros(RATE, np.int16)) is None
    assert last_voiced(tone(0.005, 0.3)) is None  # shorter than a frame
