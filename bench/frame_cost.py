"""CPU per client frame and per reply through the session runtime, without sockets.

    .venv/bin/python bench/frame_cost.py [--batches 40] [--replies 12]

The real app (routes, the Realtime codec, the session room, the tone plugin) on
a real Valkey, driven in-process over the in-memory sockets of the in-process
test tier (``tests/inproc/harness.py``): no uvicorn, no TCP, so what it prints
is the runtime's own cost, not the socket edge's.

- **frames**: batches of 200 ``input_audio_buffer.append`` of 20 ms of silence
  (``server_vad`` hears every frame, nothing answers), each closed by a
  heartbeat whose ack says the batch was handled: this process's CPU time per
  frame.
- **replies**: ``response.create`` for a 10-word tone reply, paced at real time
  as a client hears it, to its ``response.done``: CPU time per reply.

Each prints the minimum, the 10th percentile and the median over its batches:
the minimum moves least when the box is busy, which is what comparing two
trees needs: run it from each tree's root with ``PYTHONPATH`` set to it
(``cd OLD && PYTHONPATH=$PWD python /path/to/bench/frame_cost.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import tempfile
import time
from pathlib import Path

# the tree measured is the one it runs in (its tests' harness, its gateway on
# PYTHONPATH), so one copy of this file can measure an older checkout too
TREE = Path.cwd()
sys.path[:0] = [str(TREE / "tests"), str(TREE / "tests" / "inproc")]

from harness import connect, running_app  # noqa: E402
from redis_server import RedisServer  # noqa: E402

FRAME = base64.b64encode(bytes(960)).decode()  # 20 ms of 24 kHz PCM16 silence
PER_BATCH = 200


def spread(costs: list[float]) -> str:
    costs = sorted(costs)
    return (f"min {costs[0]:.2f}  p10 {costs[len(costs) // 10]:.2f}  "
            f"median {costs[len(costs) // 2]:.2f}")


async def frames(redis_url: str, batches: int) -> str:
    async with running_app(redis_url, Path(tempfile.mkdtemp())) as (app, _):
        s = await connect(app)
        await s.until("session.created")
        costs = []
        for _ in range(batches):
            t0 = time.process_time()
            for _ in range(PER_BATCH):
                s.send({"type": "input_audio_buffer.append", "audio": FRAME})
            s.send({"type": "session.heartbeat"})
            await s.until("session.heartbeat_ack")
            costs.append((time.process_time() - t0) / PER_BATCH * 1e6)
        return f"us CPU a frame:  {spread(costs)}"


async def replies(redis_url: str, count: int) -> str:
    async with running_app(redis_url, Path(tempfile.mkdtemp())) as (app, _):
        s = await connect(app)
        await s.until("session.created")
        s.send({"type": "session.update",
                "session": {"instructions": "words=10", "turn_detection": None}})
        await s.until("session.updated")
        costs = []
        for _ in range(count):
            t0 = time.process_time()
            s.send({"type": "response.create"})
            await s.until("response.done")
            costs.append((time.process_time() - t0) * 1e3)
        return f"ms CPU a reply: {spread(costs)}"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=40, help="frame batches of 200")
    p.add_argument("--replies", type=int, default=12, help="10-word replies (0: none)")
    args = p.parse_args()
    server = RedisServer().start()
    try:
        print(await frames(server.url, args.batches), flush=True)
        if args.replies:
            print(await replies(server.url, args.replies), flush=True)
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
