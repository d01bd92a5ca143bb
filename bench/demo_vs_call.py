"""The browser demo's latency against ``duplex-gateway call``'s, on the same audio.

Usage: .venv/bin/python bench/demo_vs_call.py [--questions 8] [--seed 0]
       [--turn-detection semantic_vad] [--keep DIR]

Both clients say they print mouth to ear: from the last voiced sample of the
question (found by its energy, by the client) to the first reply audio received.
This checks that they read the same wait. One cascade gateway (the default
agent); each question is a WAV (0.5 s of silence, the question, 3 s of silence,
24 kHz) spoken by a voice nothing was tuned on, rotating with ``--seed``:
espeak-ng voices (``bench/asr_heldout.py``'s accents, speeds and pitches) and
piper. No piper voice other than joe (the reply voice) ships in a package
(bench/README.md, "Listener: held-out spoken test"), so piper's joe takes
every eighth question, with its generator noise on, as the stand-in. For each
question, in alternating order and back to back on the same gateway:

- ``duplex-gateway call --wav Q.wav --turn-detection semantic_vad`` (the demo
  asks for ``semantic_vad``): its printed mouth to ear and split;
- the demo in headless Chromium (``tests/browser``'s flags) with the fake mic
  playing Q.wav: the latency it shows, read from ``__duplexDemo.stats``.

Each is a fresh session (the demo's first turn, as a person meets it). It
prints per question both figures and the difference (demo - call), then p50 and
p95 of each and of the difference, and the load average. The sanity check: the
last voiced sample each client found, against the server's ``audio_end_ms`` of
the same turn (both on that session's input clock), must agree within a 20 ms
frame: then both clocks start at the same sample of the WAV.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "browser"),
                str(REPO / "bench")]

from asr_heldout import QUESTIONS, VOICES  # noqa: E402
from demo_files import write_pcm  # noqa: E402
from gateway_process import GatewayProcess, running_cascade  # noqa: E402

from gateway.audio import resample  # noqa: E402
from gateway.call_audio import RATE  # noqa: E402

FRAME_MS = 20  # both clients send 20 ms frames: the unit the sanity check allows
WAIT_S = 180.0  # a first turn on a busy box can take a while
# espeak-ng's voices of the held-out ASR bench, then piper's joe (noisy) as the eighth
SPEAKERS = [v for v in VOICES if v[0] == "espeak"] + [("piper", "joe-noisy", 0, 0)]


# -- the questions -----------------------------------------------------------------


def say(voice: tuple[str, str, int, int], text: str) -> np.ndarray:
    """``text`` spoken by ``voice``, 24 kHz int16."""
    engine, name, speed, pitch = voice
    if engine == "piper":
        from plugins.cascade.talker import PiperTts

        tts = PiperTts(deterministic=False)
        tts.load()
        return resample(np.concatenate(list(tts.synthesize(text))), tts.sample_rate, RATE)
    import io

    import soundfile

    wav = subprocess.run(["espeak-ng", "-v", name, "-s", str(speed), "-p", str(pitch),
                          "--stdout", text], check=True, capture_output=True).stdout
    data, rate = soundfile.read(io.BytesIO(wav), dtype="int16")
    return resample(np.asarray(data, np.int16), int(rate), RATE)


def voice_label(voice: tuple[str, str, int, int]) -> str:
    engine, name, speed, _ = voice
    return f"piper {name}" if engine == "piper" else f"{name} s{speed}"


@dataclass
class Question:
    text: str
    voice: str
    wav: Path


def write_questions(out: Path, count: int, seed: int) -> list[Question]:
    """``count`` held-out questions, each by the next speaker from ``seed`` on. The
    WAV ends in 3 s of silence: it ends the turn, and Chromium's fake mic repeats
    its last 10 ms forever once the file is played (``%noloop``)."""
    lead, tail = np.zeros(RATE // 2, np.int16), np.zeros(3 * RATE, np.int16)
    questions = []
    for i in range(count):
        text = QUESTIONS[(seed * count + i) % len(QUESTIONS)]
        voice = SPEAKERS[(seed + i) % len(SPEAKERS)]
        pcm = np.concatenate([lead, say(voice, text), tail])
        wav = write_pcm(out / f"q{i + 1:02d}.wav", pcm.astype("<i2").tobytes(), RATE)
        questions.append(Question(text, voice_label(voice), wav))
    return questions


# -- one measurement by each client -------------------------------------------------


@dataclass
class Reading:
    """One client's turn: the wait, the server's split, what was heard, and where
    the client's last voiced sample was against the server's end of speech."""

    mouth_to_ear_ms: float | None = None
    split: dict[str, Any] = field(default_factory=dict)
    heard: str = ""
    voiced_minus_server_ms: float | None = None  # client's end of speech - audio_end_ms

    @property
    def client_ms(self) -> float | None:
        """The wait less the server's part of it (its turn detection, then the turn's
        end to the first audio sent): the client's own clock and the network. The
        server's speed, which the load moves by seconds, drops out."""
        detect, first = self.split.get("turn_detection"), self.split.get("first_audio")
        if self.mouth_to_ear_ms is None or detect is None or first is None:
            return None
        return self.mouth_to_ear_ms - detect - first


_WAIT = re.compile(r"end of speech → first audio: (\d+) ms")
_ENDS = re.compile(r"end of speech: (\d+) ms into .*audio_end_ms (\d+)")
_STEP = re.compile(r"^ {4}(\w+)\s+(-?\d+) ms")
_HEARD = re.compile(r"you said:\s+(.*)$")


def by_call(gw: GatewayProcess, q: Question, turn_detection: str) -> Reading:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "call", "--url", gw.ws, "--wav", str(q.wav),
         "--turn-detection", turn_detection, "--timeout-s", str(WAIT_S)],
        cwd=REPO, capture_output=True, text=True, timeout=WAIT_S + 30)
    reading = Reading()
    for line in out.stdout.splitlines():
        if wait := _WAIT.search(line):
            reading.mouth_to_ear_ms = float(wait.group(1))
        elif ends := _ENDS.search(line):
            reading.voiced_minus_server_ms = float(ends.group(1)) - float(ends.group(2))
        elif step := _STEP.match(line):
            reading.split[step.group(1)] = float(step.group(2))
        elif heard := _HEARD.search(line):
            reading.heard = heard.group(1).strip("'\"")
    if out.returncode != 0:
        print(f"  call failed ({out.returncode}): {out.stderr.strip()}", file=sys.stderr)
    return reading


def browser_flags() -> Any:
    """``tests/browser/conftest.py`` (the Chromium and flags the browser tests use),
    under a name of its own: ``tests/conftest.py`` holds the name ``conftest``."""
    spec = importlib.util.spec_from_file_location(
        "browser_conftest", REPO / "tests" / "browser" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def by_demo(playwright: Any, gw: GatewayProcess, q: Question) -> Reading:
    flags = browser_flags()
    browser = playwright.chromium.launch(
        executable_path=flags.CHROMIUM,
        args=[*flags.CHROME_ARGS, f"--use-file-for-fake-audio-capture={q.wav.resolve()}%noloop"])
    try:
        page = browser.new_context().new_page()
        page.goto(f"{gw.http}/?aec=0")  # as tests/browser: no speaker to cancel
        page.click("#talk")
        page.wait_for_function("__duplexDemo.stats.latenciesMs.length > 0 "
                               "|| __duplexDemo.stats.errors.length > 0", timeout=WAIT_S * 1000)
        page.wait_for_function("__duplexDemo.stats.events['response.done'] >= 1",
                               timeout=WAIT_S * 1000)
        stats = page.evaluate("__duplexDemo.stats")
        heard = page.evaluate("__duplexDemo.transcriptText('user')")
    finally:
        browser.close()
    reading = Reading(heard=str(heard).strip())
    if stats["errors"]:
        print(f"  demo errors: {stats['errors']}", file=sys.stderr)
    if stats["latenciesMs"]:
        reading.mouth_to_ear_ms = float(stats["latenciesMs"][0])
    if stats["splits"]:
        reading.split = dict(stats["splits"][0])
    ends = stats["speechEnds"][-1] if stats["speechEnds"] else {}
    if ends.get("voicedEndMs") is not None and ends.get("audioEndMs") is not None:
        reading.voiced_minus_server_ms = ends["voicedEndMs"] - ends["audioEndMs"]
    return reading


# -- the report ---------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fmt(ms: float | None) -> str:
    return "    -" if ms is None else f"{ms:5.0f}"


def row(n: int, q: Question, call: Reading, demo: Reading, first: str) -> str:
    diff = (None if call.mouth_to_ear_ms is None or demo.mouth_to_ear_ms is None
            else demo.mouth_to_ear_ms - call.mouth_to_ear_ms)
    detect = (fmt(call.split.get("turn_detection")) + "/"
              + fmt(demo.split.get("turn_detection")).strip())
    ends = f"{fmt(call.voiced_minus_server_ms)}/{fmt(demo.voiced_minus_server_ms).strip()}"
    rest = f"{fmt(call.client_ms)}/{fmt(demo.client_ms).strip()}"
    return (f"{n:2d} {q.voice:<20} {first:<4} {fmt(call.mouth_to_ear_ms)} "
            f"{fmt(demo.mouth_to_ear_ms)} {fmt(diff)}  {detect:>11}  {rest:>11}  {ends:>11}  "
            f"{call.heard[:28]!r} / {demo.heard[:28]!r}")


HEADER = (" n voice                first call  demo  diff  detect c/d  client c/d  "
          "end-srv c/d  heard (call / demo)")


def summary(pairs: list[tuple[Reading, Reading]], loads: list[float]) -> None:
    both = [(c.mouth_to_ear_ms, d.mouth_to_ear_ms) for c, d in pairs
            if c.mouth_to_ear_ms is not None and d.mouth_to_ear_ms is not None]
    if not both:
        print("no pair measured")
        return
    calls, demos = [c for c, _ in both], [d for _, d in both]
    diffs = [d - c for c, d in both]
    print(f"\nover {len(both)} pairs (mouth to ear, ms):")
    for name, values in (("call", calls), ("demo", demos), ("demo - call", diffs)):
        print(f"  {name:<12} p50 {statistics.median(values):6.0f}  p95 {pct(values, 0.95):6.0f}"
              f"  min {min(values):6.0f}  max {max(values):6.0f}")
    rests = [(c.client_ms, d.client_ms) for c, d in pairs
             if c.client_ms is not None and d.client_ms is not None]
    if rests:
        gaps = [d - c for c, d in rests]
        print(f"  {'client part':<12} (the wait less the server's split) demo - call: p50 "
              f"{statistics.median(gaps):6.0f}  p95 {pct(gaps, 0.95):6.0f}  "
              f"min {min(gaps):6.0f}  max {max(gaps):6.0f}")
    agree = [abs(c.voiced_minus_server_ms - d.voiced_minus_server_ms) for c, d in pairs
             if c.voiced_minus_server_ms is not None and d.voiced_minus_server_ms is not None]
    within = sum(a <= FRAME_MS for a in agree)
    print(f"  sanity: the last voiced sample against audio_end_ms agrees within a "
          f"{FRAME_MS} ms frame in {within}/{len(agree)} pairs"
          + (f" (largest gap {max(agree):.0f} ms)" if agree else ""))
    print(f"  load average (1 min) over the run: {min(loads):.2f}–{max(loads):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--turn-detection", default="semantic_vad",
                        choices=("semantic_vad", "server_vad"))
    parser.add_argument("--keep", type=Path, help="write the WAVs here and keep them")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        wavs = args.keep or Path(tmp)
        wavs.mkdir(parents=True, exist_ok=True)
        questions = write_questions(wavs, args.questions, args.seed)
        if args.turn_detection == "server_vad":
            print("note: the demo asks for semantic_vad; server_vad compares call "
                  "with a demo in semantic_vad", file=sys.stderr)
        started = time.monotonic()
        with running_cascade(Path(tmp) / "gw") as gw, sync_playwright() as playwright:
            print(f"gateway: cascade (default agent) ready in {time.monotonic() - started:.0f} s;"
                  f" turn detection {args.turn_detection}; seed {args.seed}")
            by_call(gw, questions[0], args.turn_detection)  # warm-up, not counted
            loads, pairs = [os.getloadavg()[0]], []
            print(HEADER)
            for n, q in enumerate(questions, 1):
                call_first = n % 2 == 1
                if call_first:
                    call = by_call(gw, q, args.turn_detection)
                    demo = by_demo(playwright, gw, q)
                else:
                    demo = by_demo(playwright, gw, q)
                    call = by_call(gw, q, args.turn_detection)
                pairs.append((call, demo))
                loads.append(os.getloadavg()[0])
                print(row(n, q, call, demo, "call" if call_first else "demo"), flush=True)
            summary(pairs, loads)


if __name__ == "__main__":
    main()
