"""Telephony benchmark: each carrier's latency against Twilio's, then N concurrent
emulated calls per carrier at a 20 ms cadence on the tone plugin, next to a
baseline of the same calls over /v1/realtime.

    .venv/bin/python bench/telephony.py [--calls 1,8,32] [--seconds 10] [--probes 5]
                                        [--carriers twilio,vonage] [--quick]

Every carrier is a row of ``bench/telephony_carriers.py`` (Twilio, Telnyx, Plivo,
Vonage, Exotel): its webhook signed as the carrier signs it (or, for Exotel, Basic
auth on the upgrade), its messages (JSON text, or Vonage's bare binary frames) and
its audio (μ-law 8 kHz; Vonage 16-bit PCM at 16 kHz, Exotel at 8 kHz). The caller
sends 20 ms frames whatever the carrier (Exotel's real peer sends 100 ms at a time).

Latency, per carrier, over ``--probes`` calls one at a time, medians:
- ``mouth-to-ear ms``: from the caller's last frame of speech (1 s of tone) to
  the first reply audio on the carrier's socket (the VAD's end of turn included);
- ``barge-in ms``: from the caller's first frame of speech over a reply to the
  carrier's clear message, which silences what it still buffers (the VAD's
  start of speech included). The probe plays what it is sent at real time and
  acknowledges each playback point once what came before it has played.

Load, per carrier: each call streams 20 ms frames on an absolute schedule, in a
loop of 1 s of tone then 2 s of silence; the tone plugin answers each turn with
1.4 s of audio (``words=3``), and the caller acknowledges playback points at
once (no playout). The baseline is the same caller speaking the OpenAI Realtime
protocol with ``audio/pcmu`` in and out, so the difference is what a carrier's
adapter costs (translation, playback points, the extra messages, resampling).

Columns:
- ``jitter p50/p99 ms``: for consecutive outbound audio chunks of one reply (the
  audio between two playback points), inter-arrival time minus the previous
  chunk's audio duration. Negative is audio sent ahead (the ``--output-lead-ms``
  lead, buffered by the carrier); positive p99 is how late a chunk came relative
  to real time.
- ``late>20ms``: chunks more than 20 ms later than real time (a gap a caller may hear).
- ``cpu %/call``: the gateway process's CPU time over the phase, divided by the
  calls and the phase's wall time (percent of one core per call).

It starts its own gateway (``gateway.cli serve --port 0 --plugin tone`` on an
embedded Valkey in a temporary --data-dir, every carrier's route on with the
bench's own credentials) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import websockets

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.telephony_carriers import (  # noqa: E402
    CARRIERS,
    FRAME_S,
    GATEWAY_FLAGS,
    ULAW_8K,
    Carrier,
    Frame,
    Stream,
)

RATE = 8000
READY = re.compile(r"duplex-gateway ready: http://([^/]+)/")
INSTRUCTIONS = "words=3"
TONE_PCM = (0.3 * 32767 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE)).astype(np.int16)
CYCLE_PCM = np.concatenate([TONE_PCM, np.zeros(2 * RATE, dtype=np.int16)])  # 1 s on, 2 s off


@dataclass
class CallStats:
    bytes_per_ms: float = 8.0  # of the carrier's audio: μ-law 8 kHz unless said
    jitter_ms: list[float] = field(default_factory=list)
    chunks: int = 0
    _last: tuple[str, float, float] | None = None  # (response, arrival, duration ms)

    def arrived(self, response: str, payload_bytes: int) -> None:
        now = time.monotonic()
        duration = payload_bytes / self.bytes_per_ms
        if self._last is not None and self._last[0] == response:
            self.jitter_ms.append(1000 * (now - self._last[1]) - self._last[2])
        self._last = (response, now, duration)
        self.chunks += 1


async def _pace(seconds: float, offset: float, frames: list[bytes],
                send: Callable[[bytes], Awaitable[None]]) -> None:
    """Send frames on an absolute schedule (frame i at t0 + i·20 ms): no drift."""
    loop = asyncio.get_running_loop()
    t0 = loop.time() + offset
    for i in range(int(seconds / FRAME_S)):
        delay = t0 + i * FRAME_S - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(frames[i % len(frames)])


async def _open(carrier: Carrier, http_base: str, instructions: str
                ) -> tuple[Stream, websockets.ClientConnection]:
    stream = await carrier.dial(http_base, instructions)
    ws = await websockets.connect(stream.url, additional_headers=stream.headers,
                                  max_size=None)
    for message in stream.opening:
        await ws.send(message)
    return stream, ws


async def carrier_call(carrier: Carrier, http_base: str, seconds: float,
                       offset: float) -> CallStats:
    """One caller on ``carrier``'s wire; each playback point acknowledged at once."""
    stats = CallStats(bytes_per_ms=carrier.audio.bytes_per_s / 1000)
    frames = carrier.audio.frames(CYCLE_PCM)
    stream, ws = await _open(carrier, http_base, INSTRUCTIONS)
    async with ws:
        async def read() -> None:
            buffered = 0  # reply bytes since the last playback point
            async for raw in ws:
                heard = carrier.read(raw)
                buffered += len(heard.audio)
                if heard.point is not None:  # it names the response: "<response>:<n>"
                    stats.arrived(heard.point.rpartition(":")[0], buffered)
                    buffered = 0
                    await ws.send(stream.ack(heard.point))

        async def media(frame: bytes) -> None:
            await ws.send(stream.media(frame))

        reader = asyncio.create_task(read())
        await _pace(seconds, offset, frames, media)
        if stream.hangup is not None:
            await ws.send(stream.hangup)
        reader.cancel()
    return stats


async def realtime_call(ws_url: str, seconds: float, offset: float) -> CallStats:
    stats = CallStats()
    async with websockets.connect(ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": {
            "instructions": INSTRUCTIONS,
            "audio": {"input": {"format": {"type": "audio/pcmu"}},
                      "output": {"format": {"type": "audio/pcmu"}}}}}))

        async def append(frame: bytes) -> None:
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(frame).decode()}))

        async def read() -> None:
            async for raw in ws:
                ev = json.loads(raw)
                if ev["type"] == "response.output_audio.delta":
                    stats.arrived(ev["response_id"], len(base64.b64decode(ev["delta"])))

        reader = asyncio.create_task(read())
        await _pace(seconds, offset, ULAW_8K.frames(CYCLE_PCM), append)
        reader.cancel()
        await ws.send(json.dumps({"type": "session.close"}))
    return stats


async def _speak(ws: websockets.ClientConnection, media: Callable[[bytes], Frame], frame: bytes,
                 seconds: float, until: asyncio.Event | None = None) -> float:
    """Send ``frame`` every 20 ms for ``seconds`` or until ``until``; when the last went."""
    loop = asyncio.get_running_loop()
    t0 = sent = loop.time()
    for i in range(int(seconds / FRAME_S)):
        if until is not None and until.is_set():
            break
        delay = t0 + i * FRAME_S - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await ws.send(media(frame))
        sent = time.monotonic()
    return sent


async def probe(carrier: Carrier, http_base: str) -> tuple[float, float]:
    """One call's mouth-to-ear and barge-in-to-silence, in ms."""
    tone, silence = carrier.audio.frames(TONE_PCM)[0], carrier.audio.frames(
        np.zeros(RATE // 50, dtype=np.int16))[0]
    heard, cleared = asyncio.Event(), asyncio.Event()
    at: dict[str, float] = {}
    stream, ws = await _open(carrier, http_base, "words=40")
    async with ws:
        played_until = 0.0  # the carrier plays what it buffers at real time
        acks: list[asyncio.Task[None]] = []

        async def ack_at(when: float, message: Frame) -> None:
            await asyncio.sleep(max(0.0, when - time.monotonic()))
            await ws.send(message)

        async def read() -> None:
            nonlocal played_until
            async for raw in ws:
                got = carrier.read(raw)
                if got.audio:
                    now = time.monotonic()
                    if not heard.is_set():
                        at["heard"] = now
                        heard.set()
                    played_until = (max(played_until, now)
                                    + len(got.audio) / carrier.audio.bytes_per_s)
                if got.point is not None:  # acknowledged once what came before it has played
                    acks.append(asyncio.create_task(ack_at(played_until, stream.ack(got.point))))
                if got.clear and not cleared.is_set():
                    at["cleared"] = time.monotonic()
                    cleared.set()
                    for task in acks:
                        task.cancel()

        reader = asyncio.create_task(read())
        spoke = await _speak(ws, stream.media, tone, 1.0)
        await _speak(ws, stream.media, silence, 10.0, heard)
        await _speak(ws, stream.media, silence, 1.0)  # a second of the reply plays
        barged = time.monotonic()
        await _speak(ws, stream.media, tone, 5.0, cleared)
        if stream.hangup is not None:
            await ws.send(stream.hangup)
        reader.cancel()
        for task in acks:
            task.cancel()
    if "heard" not in at or "cleared" not in at:
        raise RuntimeError(f"{carrier.name}: no reply or no clear")
    return 1000 * (at["heard"] - spoke), 1000 * (at["cleared"] - barged)


async def latency(http_base: str, probes: int, carriers: list[Carrier]) -> None:
    print(f"{'carrier':9} {'audio':>10} {'probes':>6} {'mouth-to-ear ms':>16} "
          f"{'barge-in ms':>12}")
    for carrier in carriers:
        results = [await probe(carrier, http_base) for _ in range(probes)]
        m2e, b2s = (float(np.median([r[i] for r in results])) for i in (0, 1))
        audio = f"{'ulaw' if carrier.audio.ulaw else 'l16'} {carrier.audio.rate // 1000}k"
        print(f"{carrier.name:9} {audio:>10} {probes:6d} {m2e:16.0f} {b2s:12.0f}", flush=True)
    print()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def phase(name: str, n: int, seconds: float, pid: int,
                make: Callable[[float], Awaitable[CallStats]]) -> None:
    cpu0, t0 = _cpu_s(pid), time.monotonic()
    # spread the callers over the 3 s cycle, as independent callers would be
    results = await asyncio.gather(*(make(3.0 * i / n) for i in range(n)))
    wall = time.monotonic() - t0
    cpu = _cpu_s(pid) - cpu0
    jitter = np.array([j for r in results for j in r.jitter_ms] or [0.0])
    late = int(np.sum(jitter > 20.0))
    print(f"{name:9} {n:5d} {sum(r.chunks for r in results):7d} "
          f"{np.percentile(jitter, 50):8.1f} {np.percentile(jitter, 99):8.1f} {late:9d} "
          f"{100 * cpu / wall / n:10.2f}", flush=True)


def start_gateway(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--plugin", "tone",
         "--data-dir", data_dir, "--output-lead-ms", "300", "--max-sessions", "1024",
         "--log-level", "warning", *GATEWAY_FLAGS],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = READY.search(line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the gateway did not start")


async def run(calls: list[int], seconds: float, probes: int, carriers: list[Carrier]) -> None:
    with tempfile.TemporaryDirectory(prefix="dg-bench-") as tmp:
        proc, address = start_gateway(tmp)
        base = f"http://{address}"
        try:
            await latency(base, probes, carriers)
            print(f"{'endpoint':9} {'calls':>5} {'chunks':>7} {'jit p50':>8} {'jit p99':>8} "
                  f"{'late>20ms':>9} {'cpu %/call':>10}")
            for n in calls:
                await phase("realtime", n, seconds, proc.pid, lambda off: realtime_call(
                    f"ws://{address}/v1/realtime", seconds, off))
                for carrier in carriers:
                    await phase(carrier.name, n, seconds, proc.pid,
                                partial(carrier_call, carrier, base, seconds))
        finally:
            proc.terminate()
            proc.wait(15)


def main(argv: list[str] | None = None) -> int:
    names = [c.name for c in CARRIERS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", default="1,8,32", help="comma-separated concurrent call counts")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    p.add_argument("--probes", type=int, default=5, help="latency calls per carrier")
    p.add_argument("--carriers", default=",".join(names),
                   help=f"comma-separated, of {','.join(names)} (twilio is always run)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2 probes, 1 and 4 calls for 4 s")
    args = p.parse_args(argv)
    wanted = {"twilio", *args.carriers.split(",")}
    if unknown := wanted - set(names):
        p.error(f"unknown carriers: {', '.join(sorted(unknown))}")
    calls = [1, 4] if args.quick else [int(n) for n in args.calls.split(",")]
    seconds = 4.0 if args.quick else args.seconds
    asyncio.run(run(calls, seconds, 2 if args.quick else args.probes,
                    [c for c in CARRIERS if c.name in wanted]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
