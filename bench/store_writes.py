"""Client CPU per fenced Redis write: one call at a time vs the store's write batcher.

    .venv/bin/python bench/store_writes.py [--writes 3000] [--batch 16] [--rounds 5]

Starts its own Valkey (the embedded binary) on a unix socket in a temporary dir
and times ``renew`` (the smallest fenced script) four ways, in this process:

- ``per-command timeouts``: the call as the store made it before the batcher, a
  script object on a client with redis-py's ``socket_timeout`` (an
  ``asyncio.wait_for`` task per send, a timer per reply) inside the store deadline;
- ``batched, alone``: ``RedisSessionStore.renew`` on the gateway's client (no
  per-command timeout), one write in flight, so every batch holds one write;
- ``batched, N at once``: N sessions renewing in the same tick, one batch;
- ``plain EVALSHA``: redis-py's ordinary command path, no socket timeout, for scale.

The ways take turns, ``--rounds`` times; it prints the median CPU and wall
microseconds per write of this process (Valkey's own CPU is not counted).
Figures move with the machine; compare them within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from duplex.store import RedisSessionStore, codec, connect, keys
from duplex.store.embedded import answers_ping, server_binary, stop_child, wait_until

SESSIONS = 64


async def _open(store: RedisSessionStore) -> None:
    for i in range(SESSIONS):
        await store.open_session(f"s{i}", owner="bench", token_digest="d", config="{}",
                                 now=1.0, max_sessions=SESSIONS, max_sessions_per_owner=0,
                                 idle_ttl_s=60.0, grace_s=30.0)


async def _timed(writes: int, at_once: int,
                 write: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    await write(0)  # the script loaded, the connection made
    cpu, wall = time.process_time(), time.perf_counter()
    for k in range(writes // at_once):
        if at_once == 1:  # no gather: it would add a task per write
            await write(k)
        else:
            await asyncio.gather(*(write(k * at_once + j) for j in range(at_once)))
    n = (writes // at_once) * at_once
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return 1e6 * cpu / n, 1e6 * wall / n


async def run(url: str, writes: int, batch: int, rounds: int) -> None:
    old = RedisSessionStore(connect(url), timeout_s=2.0)
    new = RedisSessionStore(connect(url, socket_timeouts=False), timeout_s=2.0)
    try:
        await _open(old)

        def sid(i: int) -> str:
            return f"s{i % SESSIONS}"

        async def per_command(i: int) -> None:
            s = sid(i)
            leases = keys.leases(keys.bucket_of(s))
            await old._run("renew", old._s.renew(
                keys=[keys.meta(s), leases], args=[s, "bench", 1, codec.num(2.0)]))

        async def batched(i: int) -> None:
            await new.renew(sid(i), "bench", 1, 2.0)

        async def plain(i: int) -> None:
            s = sid(i)
            leases = keys.leases(keys.bucket_of(s))
            async with asyncio.timeout(2.0):
                await new._r.evalsha(new._s.renew.sha, 2, keys.meta(s), leases,
                                     s, "bench", 1, codec.num(2.0))

        ways = [("per-command timeouts", 1, per_command), ("batched, alone", 1, batched),
                (f"batched, {batch} at once", batch, batched), ("plain EVALSHA", 1, plain)]
        figures: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in ways}
        for _ in range(rounds):
            for label, at_once, write in ways:
                figures[label].append(await _timed(writes, at_once, write))
        for label, got in figures.items():
            cpu = statistics.median(c for c, _ in got)
            wall = statistics.median(w for _, w in got)
            print(f"  {label:26s} {cpu:7.1f} us CPU  {wall:7.1f} us wall  per write "
                  f"(median of {rounds})")
    finally:
        await old.close()
        await new.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writes", type=int, default=3000, help="writes timed per way")
    p.add_argument("--batch", type=int, default=16, help="sessions writing in one tick")
    p.add_argument("--rounds", type=int, default=5, help="turns each way takes")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="store-writes-"))
    sock = tmp / "valkey.sock"
    server = subprocess.Popen([server_binary(), "--port", "0", "--unixsocket", str(sock),
                               "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_until(lambda: answers_ping(sock), 10.0):
            raise SystemExit("valkey did not start")
        print(f"store writes: {args.writes} renew calls per way, Valkey on {sock}")
        asyncio.run(run(f"unix://{sock}", args.writes, args.batch, args.rounds))
    finally:
        stop_child(server)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
