"""Voice-to-voice latency of the cascade plugin, next to the tone plugin (the same
gateway path with no models) and a sequential baseline (``bench/sequential.py``),
measured in the same run.

Usage: .venv/bin/python bench/voice_latency.py [--turns 20] [--runs 1] [--barge-ins 5]
       [--turn-detection semantic_vad,server_vad] [--plugins tone,cascade]
       [--no-baseline] [--quick]

For each plugin and each turn detection (``--turn-detection``: ``semantic_vad``,
the target mode, whose window follows the words heard so far, and
``server_vad``, OpenAI's fixed 500 ms window; the session asks for it with a
``session.update``) it starts a fresh gateway (``--runs`` times), then speaks
questions (synthesised with piper, streamed at real time in 20 ms frames) and
reports, over the turns:

- mouth to ear: the last voiced sample of the question (found in the audio by
  its energy) sent → the first reply audio received, p50/p95, the first turn
  of each fresh gateway apart from the later ones (the warm-up at ``/readyz``
  should make them alike: target within 1.3x); under it the server's split
  from ``response.done.timings_ms``: the turn detector's wait (end of speech →
  the turn's end decided), then from there to the transcript, each stage's
  first output and the first audio sent; and ``speech_stopped`` → first audio;
- whether the overlap the agent relies on happened, per turn: under
  ``semantic_vad`` the turn ended by its words (decided in under 600 ms: the
  window for finished words is 200 ms, 700 ms otherwise), the reply adopted
  from the guess started at the pause (``duplex_stage_guesses_total`` from
  ``/metrics``; warm prefills count as started), and the first audio sent
  within 40 ms of the thinker's first clause (its speech made ahead);
- the sequential baseline on the same questions: VAD end → whole-turn
  transcription → LLM to its first sentence → TTS of it, each step's time;
- barge-in: the user starts talking over a reply → ``response.done{cancelled}``,
  measured from the first frame of the interruption (the VAD needs ~64 ms of
  speech to be sure);
- concurrent sessions: N sessions each holding one turn at once, their mouth to
  ear (p50, max); a level is "held" when every session's reply audio arrives at
  least as fast as it plays. The cascade sessions a box holds at the target is
  the largest N held with mouth to ear within it; 1 is the single-session
  baseline of the same run.

Targets from the issue (2 CPU cores): mouth to ear p50 <= 400 ms and p95 <= 700 ms
(semantic_vad), barge-in <= 150 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from gateway_process import GatewayProcess  # noqa: E402

from gateway.audio import resample  # noqa: E402
from gateway.call_audio import last_voiced  # noqa: E402

QUESTIONS = [
    "What is the capital of France?", "How many legs does a spider have?",
    "What color is the sky?", "Can you name a fruit?", "What is two plus two?",
    "Where do penguins live?", "What do bees make?", "How are you today?",
    "What is the opposite of hot?", "Name a big animal.",
]
# barge-ins need a reply still playing when the user cuts in: ask for a long one
LONG_REPLY_QUESTION = "Tell me a long story about a dragon who lives in a castle."
FRAME = 480  # 20 ms at 24 kHz


def speech(text: str) -> np.ndarray:
    from plugins.cascade.talker import PiperTts

    tts = PiperTts(deterministic=True)
    tts.load()
    pcm = np.concatenate(list(tts.synthesize(text)))
    return resample(pcm, tts.sample_rate, 24000)


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


# how long an event may take; a bench may allow more on a busy box
WAIT_S = 90.0


class Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.arrived = asyncio.Event()
        self.voiced_sent: float | None = None  # when the last voiced sample went out

    async def pump(self) -> None:
        async for raw in self.ws:
            self.events.append((time.monotonic(), json.loads(raw)))
            self.arrived.set()

    async def until(self, kind: str, after: int = 0) -> tuple[float, dict[str, Any]]:
        """The first ``kind`` event at index >= ``after`` (waits at most ``WAIT_S``)."""
        async with asyncio.timeout(WAIT_S):
            while True:
                for t, ev in self.events[after:]:
                    if ev["type"] == kind:
                        return t, ev
                self.arrived.clear()
                await self.arrived.wait()

    async def stream(self, pcm: np.ndarray, voiced_end: int | None = None) -> float:
        """Send ``pcm`` at real time; returns when its first frame went out. The
        frame holding sample ``voiced_end - 1`` sets ``voiced_sent``."""
        t0 = time.monotonic()
        self.voiced_sent = None
        for i in range(0, len(pcm), FRAME):
            delay = t0 + (i // FRAME) * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # real-time pacing of the microphone
            chunk = pcm[i:i + FRAME].astype("<i2").tobytes()
            await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                           "audio": base64.b64encode(chunk).decode()}))
            if voiced_end is not None and i < voiced_end <= i + FRAME:
                self.voiced_sent = time.monotonic()
        return t0


MOUTH_TO_EAR = "mouth to ear"


async def one_turn(s: Session, pcm: np.ndarray) -> dict[str, float]:
    """Speak ``pcm``; its mouth to ear, ``speech_stopped`` → first audio, and the
    server's split (``server <phase>``), in ms."""
    mark = len(s.events)
    await s.stream(np.concatenate([pcm, np.zeros(24000, np.int16)]), last_voiced(pcm))
    t_stop, _ = await s.until("input_audio_buffer.speech_stopped", mark)
    t_audio, _ = await s.until("response.output_audio.delta", mark)
    _, done = await s.until("response.done", mark)
    row = {"speech_stopped → first audio": 1000 * (t_audio - t_stop)}
    if s.voiced_sent is not None:
        row[MOUTH_TO_EAR] = 1000 * (t_audio - s.voiced_sent)
    server = done.get("timings_ms") or {}  # the server's split of the same wait
    row.update({f"server {k}": float(v) for k, v in server.items()})
    return row


async def barge_in(s: Session, question: np.ndarray, interruption: np.ndarray) -> float | None:
    """ms from the interruption's first frame to the cancel; None when the reply
    was over before the interruption was heard (a short answer)."""
    mark = len(s.events)
    await s.send_instructions("Answer in great detail, with at least five sentences.")
    await s.stream(np.concatenate([question, np.zeros(24000, np.int16)]))
    await s.until("response.output_audio.delta", mark)
    mark = len(s.events)
    t0 = await s.stream(np.concatenate([interruption, np.zeros(24000, np.int16)]))
    t_done, done = await s.until("response.done", mark)
    after = next(i for i, (_, ev) in enumerate(s.events) if ev is done) + 1
    await s.until("response.done", after)  # the interruption gets its own answer
    if done["response"]["status"] != "cancelled":
        return None
    return 1000 * (t_done - t0)


async def send_instructions(self: Session, text: str) -> None:
    await self.ws.send(json.dumps({"type": "session.update",
                                   "session": {"instructions": text}}))


Session.send_instructions = send_instructions  # type: ignore[attr-defined]


TURN_TYPES = ("semantic_vad", "server_vad")


async def connect(url: str, turn_type: str = "server_vad") -> tuple[Session, asyncio.Task[None]]:
    """A session whose turns end by ``turn_type`` (its defaults: ``server_vad``'s
    500 ms window, ``semantic_vad``'s ``auto`` eagerness)."""
    import websockets

    ws = await websockets.connect(url, max_size=None)
    s = Session(ws)
    task = asyncio.get_running_loop().create_task(s.pump())
    await s.until("session.created")
    if turn_type != "server_vad":  # the gateway's default
        mark = len(s.events)
        await ws.send(json.dumps({"type": "session.update",
                                  "session": {"type": "realtime", "audio": {"input": {
                                      "turn_detection": {"type": turn_type}}}}}))
        _, ev = await s.until("session.updated", mark)
        assert ev["session"]["audio"]["input"]["turn_detection"]["type"] == turn_type, ev
    return s, task


async def concurrent(url: str, turn_type: str, n: int,
                     pcm: np.ndarray) -> tuple[bool, float, float]:
    """N sessions ask at once: (real time held, mouth to ear p50, its max); held
    when each reply's audio arrives at least as fast as it plays."""
    sessions = [await connect(url, turn_type) for _ in range(n)]
    rows = await asyncio.gather(*(one_turn(s, pcm) for s, _ in sessions))
    held = True
    for s, _ in sessions:
        deltas = [(t, len(base64.b64decode(e["delta"])) / 48.0) for t, e in s.events
                  if e["type"] == "response.output_audio.delta"]
        if len(deltas) > 1:
            wall = 1000 * (deltas[-1][0] - deltas[0][0])
            audio = sum(ms for _, ms in deltas[:-1])
            held = held and wall <= audio + 250  # arrives at least as fast as it plays
    for s, task in sessions:
        await s.ws.close()
        task.cancel()
    waits = [r[MOUTH_TO_EAR] for r in rows if MOUTH_TO_EAR in r]
    return held, statistics.median(waits) if waits else float("nan"), max(waits, default=0.0)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def measure(plugin: str, turn_type: str, turns: int, barges: int, levels: list[int],
                  questions: list[np.ndarray], runs: int) -> dict[str, Any]:
    """``runs`` fresh gateways: each one's first turn, then ``turns - 1`` more in
    the same session; barge-ins and concurrent sessions on the last one."""
    firsts: list[dict[str, float]] = []
    rows: list[dict[str, float]] = []
    extra: dict[str, Any] = {}
    guesses: Counter[str] = Counter()
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            gw = GatewayProcess(Path(tmp), args=["--plugin", plugin])
            gw.start(timeout_s=300)  # ready: everything a first turn touches is warm
            try:
                s, task = await connect(gw.ws, turn_type)
                firsts.append(await one_turn(s, questions[run % len(questions)]))
                rows += [await one_turn(s, questions[i % len(questions)])
                         for i in range(1, turns)]
                await s.ws.close()
                task.cancel()
                guesses.update(scrape_guesses(gw.http))
                if run == runs - 1:
                    extra = await barges_and_levels(gw, plugin, turn_type, barges, levels,
                                                    questions)
            finally:
                gw.stop()
    return {"first": firsts, "rows": rows, "guesses": guesses, **extra}


GUESS_LINE = re.compile(r'^duplex_stage_guesses_total\{[^}]*outcome="(\w+)"[^}]*\} (\S+)$')


def scrape_guesses(http: str) -> Counter[str]:
    """The thinker's guesses (``duplex_stage_guesses_total``) by outcome, from
    the gateway's ``/metrics``: how many replies were started at a pause, and
    how many of them became the turn's reply (adopted)."""
    import httpx

    text = httpx.get(f"{http}/metrics", timeout=30).text
    return Counter({m[1]: int(float(m[2])) for m in map(GUESS_LINE.match, text.splitlines())
                    if m})


async def barges_and_levels(gw: GatewayProcess, plugin: str, turn_type: str, barges: int,
                            levels: list[int], questions: list[np.ndarray]) -> dict[str, Any]:
    cascade = plugin == "cascade"
    s, task = await connect(gw.ws, turn_type)
    interruption = speech("Stop, thank you.") if cascade else tone(0.8)
    long_ask = speech(LONG_REPLY_QUESTION) if cascade else questions[0]
    barge: list[float] = []
    for _ in range(3 * barges):  # a short reply can end before the user cuts in
        if len(barge) == barges:
            break
        ms = await barge_in(s, long_ask, interruption)
        if ms is not None:
            barge.append(ms)
    await s.ws.close()
    task.cancel()
    conc = {n: await concurrent(gw.ws, turn_type, n, questions[1]) for n in levels}
    return {"barge": barge, "concurrency": conc}


def sequential_baseline(questions: list[np.ndarray], turns: int) -> list[dict[str, Any]]:
    """The same questions, in the same order, through ``bench/sequential.py``."""
    from sequential import Sequential

    from plugins.cascade.listener import WhisperAsr
    from plugins.cascade.talker import PiperTts

    ears, piper = WhisperAsr(), PiperTts(deterministic=True)
    ears.load()
    piper.load()
    pipeline = Sequential(ears, piper)
    return [pipeline.turn(np.concatenate([questions[i % len(questions)],
                                          np.zeros(24000, np.int16)])) for i in range(turns)]


def line(label: str, values: list[float]) -> str:
    return (f"  {label:<32} p50 {pct(values, 0.5):7.0f} ms   p95 {pct(values, 0.95):7.0f} ms"
            f"   ({len(values)})")


def report(plugin: str, turn_type: str, result: dict[str, Any]) -> None:
    rows, firsts = result["rows"], result["first"]
    print(f"\n{plugin}, {turn_type}: {len(firsts)} first turns (a fresh gateway each), "
          f"{len(rows)} later turns")
    keys = sorted({k for r in rows + firsts for k in r},
                  key=lambda k: (k != MOUTH_TO_EAR, not k.startswith("speech"), k))
    for key in keys:
        values = [r[key] for r in rows if key in r]
        if values:
            print(line(key, values))
    first = [r[MOUTH_TO_EAR] for r in firsts if MOUTH_TO_EAR in r]
    later = [r[MOUTH_TO_EAR] for r in rows if MOUTH_TO_EAR in r]
    if first and later:
        print(line(f"{MOUTH_TO_EAR}, first turn", first)
              + f"   {pct(first, 0.5) / pct(later, 0.5):.2f}x the later p50 (target <= 1.3x)")
        for key in (k for k in keys if k != MOUTH_TO_EAR):
            values = [r[key] for r in firsts if key in r]
            if values:
                print(line(f"  {key}, first turn", values))
    mechanisms(turn_type, rows + firsts, result["guesses"])
    if result["barge"]:
        b = result["barge"]
        print(f"  {'barge-in → cancelled':<32} p50 {pct(b, 0.5):7.0f} ms   "
              f"max {max(b):7.0f} ms  ({len(b)} barge-ins)")
    for n, (held, wait, worst) in result["concurrency"].items():
        print(f"  {n} concurrent: {MOUTH_TO_EAR} p50 {wait:6.0f} ms, max {worst:6.0f} ms, "
              f"real time {'held' if held else 'NOT held'}")


# semantic_vad's window for words that look finished is 200 ms, 700 ms otherwise
# (eagerness auto, plugins.turn_end): a turn decided well under 700 ms was ended
# by its words
ENDED_BY_WORDS_MS = 600
# the talker sends a guess's speech, made ahead, as soon as the reply's first
# clause is the guess's; synthesising the clause then would take 100 ms or more
HELD_SPEECH_MS = 40


def mechanisms(turn_type: str, rows: list[dict[str, float]], guesses: Counter[str]) -> None:
    """How often the overlap the agent relies on happened: the turn ended by
    its words (semantic_vad), the reply adopted from the guess made at the
    pause, and its first clause's speech made ahead and sent at once."""
    timed = [r for r in rows if "server first_clause" in r and "server first_audio" in r]
    if not timed:
        return
    held = sum(r["server first_audio"] - r["server first_clause"] <= HELD_SPEECH_MS
               for r in timed)
    parts = [f"guesses adopted {guesses['adopted']} of {len(rows)} turns "
             f"({guesses['started']} started, warm prefills included)",
             f"first audio sent at the first clause (speech made ahead) {held}"]
    if turn_type == "semantic_vad":
        ended = sum(r.get("server turn_detection", 1e9) < ENDED_BY_WORDS_MS for r in rows)
        parts.insert(0, f"turns ended by their words (< {ENDED_BY_WORDS_MS} ms) {ended}")
    print("  " + "; ".join(parts))


def report_baseline(rows: list[dict[str, Any]]) -> None:
    print(f"\nsequential baseline (same models, one step after another): {len(rows)} turns")
    for key in ("mouth_to_ear", "turn_detection", "transcribe", "think", "speak"):
        print(line(key.replace("_", " ") if key == "mouth_to_ear" else f"  {key}",
                   [r[key] for r in rows]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per fresh gateway")
    parser.add_argument("--runs", type=int, default=1,
                        help="fresh gateways per plugin (each gives one first turn)")
    parser.add_argument("--barge-ins", type=int, default=5)
    parser.add_argument("--concurrency", default="1,2,3")
    parser.add_argument("--turn-detection", default=",".join(TURN_TYPES),
                        help="the turn detections to measure, in order (comma-separated)")
    parser.add_argument("--plugins", default="tone,cascade",
                        help="the plugins to measure, in order (comma-separated)")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="5 turns, 2 barge-ins, 1-2 sessions")
    args = parser.parse_args()
    turns, barges, levels = args.turns, args.barge_ins, [int(n) for n in
                                                       args.concurrency.split(",")]
    if args.quick:
        turns, barges, levels = 5, 2, [1, 2]
    print(f"bench/voice_latency.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  (2-core machine; "
          f"targets: mouth to ear p50 <= 400 ms, p95 <= 700 ms, barge-in <= 150 ms); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    turn_types = args.turn_detection.split(",")
    if unknown := set(turn_types) - set(TURN_TYPES):
        parser.error(f"--turn-detection: {', '.join(sorted(unknown))} is none of "
                     f"{', '.join(TURN_TYPES)}")
    spoken = [speech(q) for q in QUESTIONS]
    for plugin in args.plugins.split(","):
        questions = spoken if plugin == "cascade" else [tone(1.2)] * len(QUESTIONS)
        for turn_type in turn_types:
            report(plugin, turn_type, asyncio.run(measure(
                plugin, turn_type, turns, barges, levels, questions, args.runs)))
    if not args.no_baseline:
        report_baseline(sequential_baseline(spoken, turns))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
