"""The fake microphone's WAV files and where the lead's screenshot goes.

(A module of its own: ``conftest`` is a name every test folder shares.)
"""

from __future__ import annotations

import math
import struct
import wave
from collections.abc import Sequence
from pathlib import Path

WAV_RATE = 48000
FINAL_SHOT = Path("/tmp/demo.png")


def write_wav(path: Path, script: Sequence[tuple[str, float]], *, freq: float = 440.0,
              amp: float = 0.5) -> Path:
    """16-bit mono PCM (the only kind the fake device reads reliably) from a script
    of ("tone" | "silence", seconds). It must end in silence: with %noloop the fake
    device repeats its last 10 ms buffer forever."""
    assert script[-1][0] == "silence" and script[-1][1] >= 0.5
    out = bytearray()
    for kind, seconds in script:
        n = int(seconds * WAV_RATE)
        if kind == "silence":
            out += b"\x00\x00" * n
        else:
            out += b"".join(struct.pack("<h", round(amp * 32767 * math.sin(
                2 * math.pi * freq * i / WAV_RATE))) for i in range(n))
    write_pcm(path, bytes(out), WAV_RATE)
    return path


def write_pcm(path: Path, pcm: bytes, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return path
