"""``duplex-gateway call`` against a real gateway: one spoken turn from a WAV file."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
from client import silence, tone
from gateway_process import REPO, GatewayProcess

from plugins.tone import decode_turn


def write(path: Path, pcm: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.astype("<i2").tobytes())


def test_call_holds_one_turn_and_saves_the_answer(gateway: GatewayProcess,
                                                  tmp_path: Path) -> None:
    question, answer = tmp_path / "q.wav", tmp_path / "a.wav"
    pcm = np.concatenate([silence(0.3), tone(1.2), silence(0.2)])
    pcm16k = pcm[::3]  # 24 kHz → 16 kHz: the command resamples any rate
    write(question, pcm16k, 16000)
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "call", "--url", gateway.ws, "--wav",
         str(question), "--out", str(answer), "--fast"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tone turn 1" in out.stdout  # the user's transcript
    assert "answer to turn 1" in out.stdout  # the assistant's
    assert "end of speech → first audio" in out.stdout
    assert "first_audio" in out.stdout and "transcribe" in out.stdout
    with wave.open(str(answer), "rb") as wav:
        assert wav.getframerate() == 24000
        audio = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert len(audio) >= 24000  # at least a second of reply
    assert decode_turn(audio[:4800], 24000) == 1
