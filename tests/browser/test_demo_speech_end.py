"""The demo's mouth-to-ear clock starts where ``duplex-gateway call``'s does: at the
last voiced sample of the same audio. Each client finds it by energy in the frames
it sends; both are set against the server's ``audio_end_ms`` of the same turn (on
that session's input clock, so the demo's unknown start offset in the WAV drops
out), and must agree within one 20 ms frame."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from demo_files import write_wav
from gateway_process import REPO

pytestmark = pytest.mark.slow

FRAME_MS = 20
# a burst whose end falls inside a 20 ms frame, not on its edge
MIC = [("silence", 0.5), ("tone", 1.013), ("silence", 2.5)]


def call_speech_end(ws: str, wav: Path) -> tuple[float, float]:
    """``call``'s last voiced sample and the server's ``audio_end_ms``, as it prints them."""
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "call", "--url", ws,
                          "--wav", str(wav), "--fast"], cwd=REPO, capture_output=True,
                         text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"end of speech: (\d+) ms into .*audio_end_ms (\d+)", out.stdout)
    assert found, out.stdout
    return float(found.group(1)), float(found.group(2))


def test_the_demo_and_call_find_the_same_end_of_speech(open_demo, tone_gateway,
                                                       tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "mic.wav", MIC)
    demo = open_demo(tone_gateway, wav)
    demo.talk()
    demo.wait("__duplexDemo.stats.latenciesMs.length >= 1", 20)
    stats = demo.stats()
    [ends] = stats["speechEnds"]
    voiced, server = call_speech_end(tone_gateway.ws, wav)
    # call's end is the tone's, 10 ms frames at 24 kHz, the file's start its clock's
    assert abs(voiced - 1513) <= 10, voiced
    call_gap, demo_gap = voiced - server, ends["voicedEndMs"] - ends["audioEndMs"]
    print(f"\n[speech end] call {voiced:.0f} - {server:.0f} = {call_gap:.0f} ms; demo "
          f"{ends['voicedEndMs']:.0f} - {ends['audioEndMs']:.0f} = {demo_gap:.0f} ms")
    assert abs(demo_gap - call_gap) <= FRAME_MS, (ends, voiced, server)
