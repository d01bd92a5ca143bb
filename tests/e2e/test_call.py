"""``duplex-gateway call`` as a user runs it: a subprocess against a real gateway.

The tone plugin names the turn it heard ("tone turn N") and encodes it in its
reply audio, so a transcript or an answer file that belongs to another turn, or
to a fresh session, shows.
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from client import eventually, silence, tone
from gateway_process import REPO, GatewayProcess, running_tone

from plugins.tone import decode_turn

QUESTION = np.concatenate([silence(0.3), tone(1.2), silence(0.2)])  # 24 kHz int16


def call(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "call", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=90)


def one_line_failure(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit status 1 and a single stderr line naming the cause; no traceback."""
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("duplex-gateway call: "), out.stderr
    for needle in needles:
        assert needle in lines[0], out.stderr


def write_pcm16(path: Path, pcm: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.astype("<i2").tobytes())


def answer(path: Path) -> np.ndarray:
    audio, rate = sf.read(str(path), dtype="int16")
    assert rate == 24000
    return np.asarray(audio)


def test_call_holds_one_turn_and_saves_the_answer(gateway: GatewayProcess,
                                                  tmp_path: Path) -> None:
    question, out_wav = tmp_path / "q.wav", tmp_path / "a.wav"
    write_pcm16(question, QUESTION[::3], 16000)  # 24 kHz → 16 kHz: the command resamples
    out = call("--url", gateway.ws, "--wav", question, "--out", out_wav, "--fast")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tone turn 1" in out.stdout  # the user's transcript
    assert "answer to turn 1" in out.stdout  # the assistant's
    assert "end of speech → first audio" in out.stdout and "mouth to ear" in out.stdout
    assert "first_audio" in out.stdout and "transcribe" in out.stdout
    assert "turn_detection" in out.stdout  # the server's split starts at the end of speech
    # the client finds the end of speech in its own audio; the server's VAD agrees
    ends = re.search(r"end of speech: (\d+) ms into the session's audio by its energy; "
                     r"the server's audio_end_ms (\d+)", out.stdout)
    assert ends is not None, out.stdout
    assert abs(int(ends[1]) - int(ends[2])) <= 40, ends[0]  # a VAD frame, a 10 ms frame
    audio = answer(out_wav)
    assert len(audio) >= 24000  # at least a second of reply
    assert decode_turn(audio[:4800], 24000) == 1


def test_several_files_are_turns_of_one_session_in_any_format(gateway: GatewayProcess,
                                                              tmp_path: Path) -> None:
    signal = QUESTION.astype(np.float32) / 32768
    stereo = np.stack([signal, signal], axis=1)
    files = [tmp_path / "float.wav", tmp_path / "mulaw.wav", tmp_path / "q.flac"]
    sf.write(str(files[0]), signal, 24000, subtype="FLOAT")
    sf.write(str(files[1]), stereo[::3], 8000, subtype="ULAW")  # telephone audio, 2 channels
    sf.write(str(files[2]), signal[::3], 16000)
    # several paths after one --wav, and --wav again
    out = call("--url", gateway.ws, "--wav", files[0], files[1], "--wav", files[2],
               "--out", tmp_path / "answer.wav", "--fast")
    assert out.returncode == 0, out.stdout + out.stderr
    heard = [line for line in out.stdout.splitlines() if "you said:" in line]
    assert [f"tone turn {n}," in line for n, line in enumerate(heard, 1)] == [True] * 3
    for n in (1, 2, 3):
        assert f"turn {n}/3: {files[n - 1]}" in out.stdout
        assert f"answer to turn {n}" in out.stdout
        assert decode_turn(answer(tmp_path / f"answer-{n}.wav")[:4800], 24000) == n
    assert out.stdout.count("first_audio") == 3  # each turn's timings
    assert not (tmp_path / "answer.wav").exists()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connecting to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_gateway_that_is_down_is_one_line(tmp_path: Path, closed_port: int) -> None:
    question = tmp_path / "q.wav"
    write_pcm16(question, QUESTION, 24000)
    out = call("--url", f"ws://127.0.0.1:{closed_port}/v1/realtime", "--wav", question)
    one_line_failure(out, "cannot reach a gateway", "connection refused")


def test_a_missing_file_is_one_line_before_any_call(tmp_path: Path, closed_port: int) -> None:
    question = tmp_path / "q.wav"
    write_pcm16(question, QUESTION, 24000)
    # the down gateway is never tried: files are checked first
    out = call("--url", f"ws://127.0.0.1:{closed_port}/v1/realtime",
               "--wav", question, tmp_path / "missing.wav")
    one_line_failure(out, "missing.wav: no such file")


def test_unreadable_audio_is_one_line(gateway: GatewayProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x24\x00\x00\x00WAVEnot really a wave file")
    out = call("--url", gateway.ws, "--wav", bad)
    one_line_failure(out, "bad.wav: not audio this command can read")


def test_an_error_event_is_one_line_and_the_api_key_is_sent(tmp_path: Path) -> None:
    question = tmp_path / "q.wav"
    write_pcm16(question, QUESTION, 24000)
    with running_tone(tmp_path / "gw", "--api-key", "sesame") as gw:
        refused = call("--url", gw.ws, "--wav", question, "--fast")
        admitted = call("--url", gw.ws, "--wav", question, "--fast", "--api-key", "sesame")
    one_line_failure(refused, "gateway error invalid_api_key")
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert "tone turn 1" in admitted.stdout


def test_a_gateway_gone_mid_call_is_one_line(tmp_path: Path) -> None:
    question = tmp_path / "q.wav"
    write_pcm16(question, QUESTION, 24000)
    with running_tone(tmp_path / "gw") as gw:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "call", "--url", gw.ws, "--fast",
             "--wav", question, question], cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # printed as turn 1 ends, before turn 2 starts
        gw.kill()
        stdout, stderr = proc.communicate(timeout=90)
    assert first.startswith("turn 1/2:"), first + stdout + stderr
    one_line_failure(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
                     "turn 2: the connection to the gateway was lost (1006: the "
                     "connection dropped without a close frame")


async def test_a_silent_input_is_given_up_and_its_session_ended(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.wav"
    write_pcm16(quiet, silence(1.0), 24000)
    with running_tone(tmp_path / "gw") as gw:
        out = await asyncio.to_thread(call, "--url", gw.ws, "--wav", quiet, "--fast")
        # once the input and the silence after it are sent: not --timeout-s's 60 s
        one_line_failure(out, "turn 1: the input is silent and the gateway heard no speech")
        await asyncio.to_thread(wait_for_line, gw, "closed 1000 by the client")

        async def ended() -> bool:  # a detached session would wait 30 s for a resume
            return await gw.metric("duplex_sessions_active") == 0

        await eventually(ended, 15, "the session ended with the call")


def wait_for_line(gw: GatewayProcess, text: str) -> None:
    for _ in range(200):  # the close line follows the call's exit by a moment
        if any(text in line for line in gw.output):
            return
        time.sleep(0.05)
    raise AssertionError("".join(gw.output))


def test_a_directory_is_named_a_directory(tmp_path: Path, closed_port: int) -> None:
    out = call("--url", f"ws://127.0.0.1:{closed_port}/v1/realtime", "--wav", tmp_path)
    one_line_failure(out, f"{tmp_path}: is a directory")
