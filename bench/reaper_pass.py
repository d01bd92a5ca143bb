"""The gateway's CPU for one reaper pass (``claim_expired``) with nothing due.

    .venv/bin/python bench/reaper_pass.py [--passes 200] [--rounds 5]

Every gateway process sweeps every bucket once a ``--reaper-interval-s`` (1 s),
whatever its sessions, so this is a cost per process that the relay's CPU per
session-second carries. Starts the embedded Valkey in a temporary dir and, in
this process, counts the Python calls and the arguments redis-py encodes per
pass (a profile hook: load does not move them), then times ``--rounds`` runs of
``--passes`` passes and prints the least CPU a pass (Valkey's own not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

from duplex.store import RedisSessionStore
from duplex.store.embedded import EmbeddedValkey


async def _passes(store: RedisSessionStore, n: int, now: float) -> None:
    for _ in range(n):
        await store.claim_expired("bench", now)


async def measure(url: str, passes: int, rounds: int) -> None:
    store = RedisSessionStore(aioredis.Redis.from_url(url, decode_responses=True))
    now = time.time()
    await _passes(store, 20, now)  # scripts loaded, connection made
    profile = cProfile.Profile()
    profile.enable()
    await _passes(store, passes, now)
    profile.disable()
    stats = pstats.Stats(profile)
    encoded = sum(n for (path, _, name), (_, n, *_) in stats.stats.items()
                  if name == "encode" and path.endswith("encoders.py"))
    print(f"{stats.total_calls / passes:.0f} Python calls a pass, "
          f"{encoded / passes:.0f} arguments encoded a pass")
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        await _passes(store, passes, now)
        best = min(best, (time.process_time() - start) / passes)
    print(f"CPU a pass: {best * 1e3:.3f} ms (least of {rounds} x {passes})")
    await store.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--passes", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    server = EmbeddedValkey(Path(tempfile.mkdtemp(prefix="reaper-pass-")))
    server.start()
    try:
        asyncio.run(measure(server.url, args.passes, args.rounds))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
