"""Voice-to-voice latency of the cascade plugin, next to the tone plugin (the same
gateway path with no models) measured in the same run.

Usage: .venv/bin/python bench/voice_latency.py [--turns 20] [--barge-ins 5] [--quick]

For each plugin it starts a gateway, then speaks questions (synthesised with
piper, streamed at real time in 20 ms frames) and reports, over the turns:

- end of user speech (``speech_stopped``) → first reply audio, p50/p95, with the
  server's split from ``response.done.timings_ms`` (transcribe, thinker first
  output, speech first output);
- barge-in: the user starts talking over a reply → ``response.done{cancelled}``,
  measured from the first frame of the interruption (the VAD needs ~64 ms of
  speech to be sure);
- concurrent sessions: N sessions each holding one turn at once; a level is
  "held" when every session's reply audio arrives at least as fast as it plays.

Targets from the issue (2 CPU cores): first audio p50 <= 600 ms, barge-in <= 150 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from gateway_process import GatewayProcess  # noqa: E402

from gateway.audio import resample  # noqa: E402

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


class Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.arrived = asyncio.Event()

    async def pump(self) -> None:
        async for raw in self.ws:
            self.events.append((time.monotonic(), json.loads(raw)))
            self.arrived.set()

    async def until(self, kind: str, after: int = 0) -> tuple[float, dict[str, Any]]:
        """The first ``kind`` event at index >= ``after`` (waits at most 90 s)."""
        async with asyncio.timeout(90):
            while True:
                for t, ev in self.events[after:]:
                    if ev["type"] == kind:
                        return t, ev
                self.arrived.clear()
                await self.arrived.wait()

    async def stream(self, pcm: np.ndarray) -> float:
        """Send ``pcm`` at real time; returns when its first frame went out."""
        t0 = time.monotonic()
        for i in range(0, len(pcm), FRAME):
            delay = t0 + (i // FRAME) * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # real-time pacing of the microphone
            chunk = pcm[i:i + FRAME].astype("<i2").tobytes()
            await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                           "audio": base64.b64encode(chunk).decode()}))
        return t0


async def one_turn(s: Session, pcm: np.ndarray) -> dict[str, float]:
    mark = len(s.events)
    await s.stream(np.concatenate([pcm, np.zeros(24000, np.int16)]))
    t_stop, _ = await s.until("input_audio_buffer.speech_stopped", mark)
    t_audio, _ = await s.until("response.output_audio.delta", mark)
    _, done = await s.until("response.done", mark)
    row = {"first_audio": 1000 * (t_audio - t_stop)}
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


async def connect(url: str) -> tuple[Session, asyncio.Task[None]]:
    import websockets

    ws = await websockets.connect(url, max_size=None)
    s = Session(ws)
    return s, asyncio.get_running_loop().create_task(s.pump())


async def concurrent(url: str, n: int, pcm: np.ndarray) -> tuple[bool, float]:
    """N sessions ask at once; held when each reply's audio arrives >= real time."""
    sessions = [await connect(url) for _ in range(n)]
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
    return held, statistics.median(r["first_audio"] for r in rows)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def measure(plugin: str, turns: int, barges: int, levels: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        gw = GatewayProcess(Path(tmp), args=["--plugin", plugin])
        gw.start(timeout_s=300)
        try:
            cascade = plugin == "cascade"
            questions = [speech(q) if cascade else tone(1.2) for q in QUESTIONS]
            s, task = await connect(gw.ws)
            rows = [await one_turn(s, questions[i % len(questions)]) for i in range(turns)]
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
            conc = {n: await concurrent(gw.ws, n, questions[1]) for n in levels}
        finally:
            gw.stop()
    return {"rows": rows, "barge": barge, "concurrency": conc}


def report(plugin: str, result: dict[str, Any]) -> None:
    rows = result["rows"]
    print(f"\n{plugin}: {len(rows)} turns")
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "first_audio", k))
    for key in keys:
        values = [r[key] for r in rows if key in r]
        print(f"  {key:<26} p50 {pct(values, 0.5):7.0f} ms   p95 {pct(values, 0.95):7.0f} ms")
    if result["barge"]:
        b = result["barge"]
        print(f"  {'barge-in → cancelled':<26} p50 {pct(b, 0.5):7.0f} ms   "
              f"max {max(b):7.0f} ms  ({len(b)} barge-ins)")
    for n, (held, first) in result["concurrency"].items():
        print(f"  {n} concurrent: first audio p50 {first:6.0f} ms, real time "
              f"{'held' if held else 'NOT held'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--barge-ins", type=int, default=5)
    parser.add_argument("--concurrency", default="1,2,3")
    parser.add_argument("--quick", action="store_true", help="5 turns, 2 barge-ins, 1-2 sessions")
    args = parser.parse_args()
    turns, barges, levels = args.turns, args.barge_ins, [int(n) for n in
                                                       args.concurrency.split(",")]
    if args.quick:
        turns, barges, levels = 5, 2, [1, 2]
    print(f"bench/voice_latency.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  "
          f"(2-core machine; targets: first audio p50 <= 600 ms, barge-in <= 150 ms)")
    for plugin in ("tone", "cascade"):
        report(plugin, asyncio.run(measure(plugin, turns, barges, levels)))


if __name__ == "__main__":
    main()
