"""What waiting for a Redis replica costs: a gateway behind Sentinel that makes every
lease grant and journaled event wait for one replica (``--redis-replica-acks 1``,
the default for ``redis+sentinel://``), next to the same gateway not waiting
(``--redis-replica-acks 0``), measured in the same run against the same Redis.

    .venv/bin/python bench/replication.py [--quick] [--samples N] [--seconds S]

It starts a primary, one replica and one Sentinel (``tests/redis_server.py``:
real valkey/redis processes on 127.0.0.1) and two tone gateways on the same
``redis+sentinel://`` URL, one per setting. Then, alternating between the two
gateways sample by sample so drift hits both alike:

  open        a new ``/v1/realtime`` socket until ``session.created`` (the
              admission and lease grant, then one journaled event), then a
              normal close
  round trip  ``input_audio_buffer.clear`` -> ``input_audio_buffer.cleared`` on
              an open session: one event stamped, journaled and sent
  events/s    N sessions each pipelining ``input_audio_buffer.clear`` (up to 32
              unanswered) for S seconds: events journaled and received per second

Latencies are p50 / p99 in ms. The difference is the price of a replica ack per
journaled batch: one more round trip from the primary to the replica. Figures,
not a verdict: the client, both gateways and all Redis processes share the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from gateway_process import GatewayProcess  # noqa: E402
from redis_server import ReplicatedRedis  # noqa: E402

CLEAR = json.dumps({"type": "input_audio_buffer.clear"})
WINDOW = 32  # unanswered commands per session in the throughput part


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def cell(values: list[float]) -> str:
    return f"{pct(values, 0.5):.2f} / {pct(values, 0.99):.2f}"


async def connect(url: str) -> Any:
    from websockets.asyncio.client import connect as ws_connect

    ws = await ws_connect(url, max_size=None)
    created = json.loads(await asyncio.wait_for(ws.recv(), 10))
    if created["type"] != "session.created":
        raise AssertionError(f"expected session.created, got {created}")
    return ws


async def open_once(url: str) -> float:
    t0 = time.perf_counter()
    ws = await connect(url)
    took = 1000 * (time.perf_counter() - t0)
    await ws.close()
    return took


async def round_trip(ws: Any) -> float:
    t0 = time.perf_counter()
    await ws.send(CLEAR)
    answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
    if answer["type"] != "input_audio_buffer.cleared":
        raise AssertionError(f"expected input_audio_buffer.cleared, got {answer}")
    return 1000 * (time.perf_counter() - t0)


async def events_per_second(url: str, sessions: int, seconds: float) -> float:
    conns = [await connect(url) for _ in range(sessions)]
    received = 0
    deadline = time.perf_counter() + seconds

    async def pump(ws: Any) -> None:
        nonlocal received
        credit = asyncio.Semaphore(WINDOW)

        async def send() -> None:
            while time.perf_counter() < deadline:
                await credit.acquire()
                await ws.send(CLEAR)

        sender = asyncio.create_task(send())
        try:
            while time.perf_counter() < deadline:
                try:
                    text = await asyncio.wait_for(ws.recv(), deadline - time.perf_counter())
                except TimeoutError:
                    break
                if '"input_audio_buffer.cleared"' not in text:
                    raise AssertionError(f"unexpected event: {text[:200]}")
                received += 1
                credit.release()
        finally:
            sender.cancel()

    t0 = time.perf_counter()
    await asyncio.gather(*(pump(ws) for ws in conns))
    rate = received / (time.perf_counter() - t0)
    for ws in conns:
        await ws.close()
    return rate


async def measure(urls: dict[str, str], samples: int, seconds: float,
                  sessions: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {name: {"open": [], "rtt": []} for name in urls}
    socks = {name: await connect(url) for name, url in urls.items()}
    for i in range(samples + 5):  # 5 unrecorded warm-ups
        for name, url in urls.items():
            opened = await open_once(url)
            rtts = [await round_trip(socks[name]) for _ in range(5)]
            if i >= 5:
                out[name]["open"].append(opened)
                out[name]["rtt"] += rtts
    for ws in socks.values():
        await ws.close()
    for name, url in urls.items():
        out[name]["rate"] = await events_per_second(url, sessions, seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples, 1 s windows")
    parser.add_argument("--samples", type=int, default=None, help="default 60; --quick 15")
    parser.add_argument("--seconds", type=float, default=None, help="default 4; --quick 1")
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args(argv)
    samples = args.samples or (15 if args.quick else 60)
    seconds = args.seconds or (1.0 if args.quick else 4.0)
    print(f"bench/replication.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  ({samples} samples, "
          f"{args.sessions} sessions x {seconds:g} s for events/s)")
    redis = ReplicatedRedis(replicas=1).start()
    dirs = [Path(tempfile.mkdtemp(prefix="dg-bench-")) for _ in range(2)]
    gateways = {f"acks {n}": GatewayProcess(d, args=["--plugin", "tone", "--redis-url",
                                                     redis.url, "--redis-replica-acks", str(n)])
                for n, d in zip((1, 0), dirs, strict=True)}
    try:
        for gw in gateways.values():
            gw.start()
        print(f"redis: primary :{redis.primary.port}, replica :{redis.replicas[0].port}, "
              f"sentinel :{redis.sentinel_port} ({Path(redis.primary.binary).name})")
        result = asyncio.run(measure({n: gw.ws for n, gw in gateways.items()}, samples,
                                     seconds, args.sessions))
    finally:
        for gw in gateways.values():
            gw.stop()
        redis.close()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    print()
    print(f"  {'gateway':<10} {'open (ms)':>16} {'round trip (ms)':>18} {'events/s':>10}")
    for name, r in result.items():
        print(f"  {name:<10} {cell(r['open']):>16} {cell(r['rtt']):>18} {r['rate']:>10,.0f}")
    wait, free = result["acks 1"], result["acks 0"]
    print(f"\n  the replica ack costs, p50 - p50: open "
          f"{pct(wait['open'], 0.5) - pct(free['open'], 0.5):+.2f} ms, round trip "
          f"{pct(wait['rtt'], 0.5) - pct(free['rtt'], 0.5):+.2f} ms; events/s "
          f"{wait['rate'] / free['rate']:.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
