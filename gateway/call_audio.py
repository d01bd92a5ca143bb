"""Audio files for ``duplex-gateway call``: questions in, answers out.

Reading takes anything libsndfile decodes (through ``soundfile``): WAV of any
sample format (16/24/32-bit integer, float, μ-law, A-law), FLAC, OGG/Vorbis,
MP3, … Channels are averaged and the signal is resampled with soxr to the
gateway's 24 kHz. Every failure is a ``CallError`` whose text is the whole
story, because the command prints it as one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile as sf

from duplex.config import AudioFormat
from gateway.audio import resample
from plugins.base import Pcm

__all__ = ["RATE", "CallError", "answer_paths", "check_writable", "last_voiced",
           "read_question", "write_answer"]

RATE = AudioFormat.PCM16.rate
VOICED_FRAME_MS = 10
VOICED_BELOW_PEAK_DB = 35.0  # a frame this far under the loudest is a pause, not speech
VOICED_FLOOR_DBFS = -55.0  # and one under this is silence however quiet the speech


class CallError(Exception):
    """A failure ``duplex-gateway call`` reports as one line, without a traceback."""


def read_question(path: Path) -> Pcm:
    """Mono int16 at ``RATE`` from an audio file.

    Raises ``CallError`` when the file is missing, is not audio libsndfile can
    decode, or holds no samples.
    """
    if path.is_dir():
        raise CallError(f"{path}: is a directory; give the audio files in it (--wav "
                        f"{path}/*.wav)")
    if not path.is_file():
        raise CallError(f"{path}: no such file")
    try:
        # float32 whatever the file holds: one path for every sample format, and
        # no wrap-around where a float file goes past full scale
        frames, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        reason = getattr(exc, "error_string", None) or str(exc)
        raise CallError(f"{path}: not audio this command can read ({reason})") from None
    if len(frames) == 0:
        raise CallError(f"{path}: the file holds no audio")
    return resample(_to_int16(frames.mean(axis=1)), int(rate), RATE)


def _to_int16(signal: npt.NDArray[np.float32]) -> Pcm:
    clean = np.nan_to_num(signal, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.asarray(np.round(np.clip(clean, -1.0, 1.0) * 32767), dtype=np.int16)


def last_voiced(pcm: Pcm, rate: int = RATE) -> int | None:
    """The sample just after the last voiced one in ``pcm`` (None: no voice), found by
    energy in 10 ms frames: where the speaker stopped, as the client knows it from
    the audio it sends rather than from any server event. A frame is voiced when
    its RMS is within 35 dB of the loudest frame and above -55 dBFS."""
    step = rate * VOICED_FRAME_MS // 1000
    count = len(pcm) // step
    if count == 0:
        return None
    frames = pcm[:count * step].astype(np.float64).reshape(count, step)
    rms = np.sqrt(np.mean(frames * frames, axis=1)) / 32768.0
    floor = max(float(rms.max()) * 10 ** (-VOICED_BELOW_PEAK_DB / 20),
                10 ** (VOICED_FLOOR_DBFS / 20))
    voiced = np.flatnonzero(rms >= floor)
    return None if len(voiced) == 0 else int(voiced[-1] + 1) * step


def answer_paths(out: Path, turns: int) -> list[Path]:
    """Where each turn's answer goes: ``out`` itself for one turn; for several,
    ``out`` numbered per turn (``answer.wav`` → ``answer-1.wav``, ``answer-2.wav``, …)."""
    if turns == 1:
        return [out]
    return [out.with_name(f"{out.stem}-{n}{out.suffix}") for n in range(1, turns + 1)]


def check_writable(paths: Sequence[Path]) -> None:
    """Refuse, before any call is made, answer paths that could not be written."""
    formats = sf.available_formats()
    for path in paths:
        if path.suffix[1:].upper() not in formats:
            raise CallError(f"{path}: unknown audio format {path.suffix!r} "
                            "(use .wav, .flac or .ogg)")
        if path.is_dir():
            raise CallError(f"{path}: is a directory; --out takes a file name "
                            "(answer.wav)")
        if not path.parent.is_dir():
            raise CallError(f"{path}: no such directory {path.parent}")


def write_answer(path: Path, pcm: Pcm) -> None:
    """Mono 24 kHz audio in the format the file name's extension names."""
    try:
        sf.write(str(path), pcm, RATE)
    except (RuntimeError, OSError) as exc:
        raise CallError(f"{path}: cannot write the answer ({exc})") from None
