"""Fuzz benchmark: a million hostile messages at a real gateway, next to a canary.

    .venv/bin/python bench/fuzz.py [--messages 1000000] [--connections 8]
                                   [--window 32] [--seed 1] [--quick]

It starts its own gateway (``gateway.cli serve --port 0 --plugin tone`` on an
embedded Valkey in a temporary --data-dir, 127.0.0.1 only), opens a canary
session that does voice turns all along, and from ``--connections`` sockets
sends ``--messages`` frames made by ``tests/hostile.py`` (each socket cycles a
pool of distinct frames, generated up front so the generator does not compete
with the gateway for the CPU): valid commands with one thing wrong, junk text,
deep JSON, out-of-range numbers, lone surrogates, odd binary frames. Each frame
must get exactly one ``error`` event; a socket keeps at most ``--window``
unanswered, so the session's inbox never overflows and every frame counts.

It prints the count per error code, frames left unanswered, events that were
not errors, crashes (the gateway exiting, or any 1006/1011 close: must be 0),
canary gaps (missing or repeated ``server_event_seq``: must be 0) and failed
canary turns, heartbeat probes (each hostile socket proves it lives every
``PROBE_EVERY`` frames), and the gateway's RSS before and after. Figures, not a
verdict; ``--quick`` sends 20,000.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e")]

from client import RealtimeClient, speak  # noqa: E402
from hostile import Hostile  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from duplex.store.embedded import stop_child  # noqa: E402

READY = re.compile(r"duplex-gateway ready: http://([^/\s]+)/")
PROBE_EVERY = 5000
POOL = 50_000  # distinct frames in all, split over the sockets
CRASH_CODES = (1006, 1011)


@dataclass
class Tally:
    sent: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    closes: Counter[int] = field(default_factory=Counter)
    probes: int = 0
    probes_failed: int = 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_gateway(data_dir: str, log: Counter[str]) -> tuple[subprocess.Popen[str], str]:
    """The gateway, and its address once ready; ``log`` counts its warnings and
    tracebacks from then on."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", "0",
         "--plugin", "tone", "--data-dir", data_dir, "--output-lead-ms", "300",
         "--log-level", "warning"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        match = READY.search(line)
        if match:
            # keep draining its output, or a full pipe would stall its logging
            threading.Thread(target=_count_log, args=(proc, log), daemon=True).start()
            return proc, match.group(1)
    raise RuntimeError("the gateway did not start")


def _count_log(proc: subprocess.Popen[str], log: Counter[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        log["lines"] += 1
        log["warnings"] += "WARNING" in line
        log["tracebacks"] += "Traceback" in line


async def hostile_socket(url: str, frames: list[str | bytes], count: int, window: int,
                         tally: Tally) -> None:
    """Send ``count`` frames (cycling ``frames``), at most ``window`` unanswered."""
    c = await RealtimeClient.connect(url)
    assert (await c.recv())["type"] == "session.created"
    room = asyncio.Semaphore(window)
    reader = asyncio.create_task(_replies(c, room, tally))
    try:
        for i in range(count):
            await room.acquire()
            await c.ws.send(frames[i % len(frames)])
            tally.sent += 1
            if (i + 1) % PROBE_EVERY == 0 or i + 1 == count:
                await _probe(c, room, window, tally)
    except ConnectionClosed:
        pass
    finally:
        reader.cancel()
        await c.close()


async def _replies(c: RealtimeClient, room: asyncio.Semaphore, tally: Tally) -> None:
    try:
        async for raw in c.ws:
            event = json.loads(raw)
            if event["type"] == "error":
                tally.codes[event["error"]["code"]] += 1
            elif event["type"] == "session.heartbeat_ack":
                tally.probes += 1
            else:
                tally.unexpected[event["type"]] += 1
            room.release()
    except ConnectionClosed as exc:
        tally.closes[exc.rcvd.code if exc.rcvd else 1006] += 1


async def _probe(c: RealtimeClient, room: asyncio.Semaphore, window: int,
                 tally: Tally) -> None:
    """Every frame answered, then a heartbeat answered: the session lives."""
    before = tally.probes
    await room.acquire()
    await c.send("session.heartbeat")
    for _ in range(window):  # wait for the window to drain, ack included
        try:
            await asyncio.wait_for(room.acquire(), 30)
        except TimeoutError:
            tally.probes_failed += 1
            break
    else:
        if tally.probes == before:
            tally.probes_failed += 1
    for _ in range(window):
        room.release()


async def canary(url: str, stop: asyncio.Event) -> tuple[int, int, int]:
    """Voice turns until ``stop``: (turns completed, turns failed, seq gaps)."""
    c = await RealtimeClient.connect(url)
    await c.recv()
    await c.send("session.update", session={"instructions": "words=2", "audio": {
        "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}})
    await c.until("session.updated")
    done = failed = gaps = last = 0
    while not stop.is_set():
        await speak(c, 0.3)
        try:
            status = (await c.until("response.done", 30))["response"]["status"]
        except (TimeoutError, ConnectionClosed):
            failed += 1
            break
        done, failed = done + (status == "completed"), failed + (status != "completed")
        for seq in (e["server_event_seq"] for e in c.events if "server_event_seq" in e):
            gaps, last = gaps + (seq != last + 1), seq
        c.events = []  # checked: a long run must not hold them all
    await c.close()
    return done, failed, gaps


def report(tally: Tally, seconds: float, crashed: bool, bird: tuple[int, int, int],
           rss: tuple[float, float], log: Counter[str]) -> None:
    answered = sum(tally.codes.values())
    print(f"messages sent        {tally.sent:>10,}  in {seconds:.1f} s "
          f"({tally.sent / seconds:,.0f}/s)")
    print(f"errors received      {answered:>10,}")
    for code, n in tally.codes.most_common():
        print(f"  {code:32} {n:>10,}")
    print(f"unanswered           {tally.sent - answered:>10,}")
    print(f"non-error replies    {sum(tally.unexpected.values()):>10,}  {dict(tally.unexpected)}")
    crashes = int(crashed) + sum(n for code, n in tally.closes.items() if code in CRASH_CODES)
    print(f"crashes              {crashes:>10,}  (gateway exited: {crashed}; "
          f"closes {dict(tally.closes)})")
    print(f"heartbeat probes     {tally.probes:>10,}  failed {tally.probes_failed}")
    print(f"canary turns         {bird[0]:>10,}  failed {bird[1]}")
    print(f"canary gaps          {bird[2]:>10,}")
    print(f"gateway RSS          {rss[0]:>10.1f} MiB before, {rss[1]:.1f} MiB after")
    print(f"gateway log          {log['lines']:>10,} lines: {log['warnings']:,} warnings, "
          f"{log['tracebacks']:,} tracebacks")


async def run(messages: int, connections: int, window: int, seed: int) -> int:
    per_socket = [messages // connections + (i < messages % connections)
                  for i in range(connections)]
    pools = [[source.message() for _ in range(max(1, min(n, POOL // connections)))]
             for n, source in ((n, Hostile(seed + i)) for i, n in enumerate(per_socket))]
    with tempfile.TemporaryDirectory(prefix="dg-fuzz-") as tmp:
        log: Counter[str] = Counter()
        proc, address = start_gateway(tmp, log)
        url = f"ws://{address}/v1/realtime"
        try:
            rss_before = rss_mib(proc.pid)
            tally, stop = Tally(), asyncio.Event()
            bird = asyncio.create_task(canary(url, stop))
            t0 = time.monotonic()
            await asyncio.gather(*(hostile_socket(url, pool, n, window, tally)
                                   for pool, n in zip(pools, per_socket, strict=True)))
            seconds = time.monotonic() - t0
            stop.set()
            figures = await bird
            crashed = proc.poll() is not None
            report(tally, seconds, crashed, figures, (rss_before, rss_mib(proc.pid)), log)
            return 0
        finally:
            stop_child(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--window", type=int, default=32, help="unanswered frames per socket")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages")
    args = p.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    return asyncio.run(run(messages, args.connections, args.window, args.seed))


if __name__ == "__main__":
    sys.exit(main())
