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

``--calls N`` counts instead of timing, which no load moves: the Python
functions called (and the built-in ones, apart) per frame over one batch,
and the N of the tree's own (gateway, duplex, plugins, engines: not the
event loop's, the libraries' or the harness's) that were called most, by
``file:function`` (a profile hook sees
every call; the frames run several times slower under it, but the counts are
exact). It counts frames two ways: a batch sent at once (the worker takes
what queued while it worked) and frames paced as a client sends them, one
every 20 ms, each handed to a worker that waits (the relay's case); and a
reply.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the tree measured is the one it runs in (its tests' harness, its gateway on
# PYTHONPATH), so one copy of this file can measure an older checkout too
TREE = Path.cwd()
sys.path[:0] = [str(TREE / "tests"), str(TREE / "tests" / "inproc")]

from harness import connect, running_app  # noqa: E402
from redis_server import RedisServer  # noqa: E402

FRAME = base64.b64encode(bytes(960)).decode()  # 20 ms of 24 kHz PCM16 silence
PER_BATCH = 200
# the tree's own code: what a change to the runtime moves (resumed generators and
# coroutines count as calls, as the profile hook sees them)
OWN = tuple(str(TREE / d) + "/" for d in ("gateway", "duplex", "plugins", "engines"))
PACED = 50  # frames a second, as a client sends them


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


class CallCount:
    """Every function call while on: Python ones by ``file:function``, built-ins
    by name; and the garbage collector's collections, by generation."""

    def __init__(self) -> None:
        self.python: collections.Counter[str] = collections.Counter()
        self.builtins = 0
        self.builtin: collections.Counter[str] = collections.Counter()
        self.collections = [0, 0, 0]  # by generation: what allocations cost beyond calls
        # of the Python calls, those of the tree's own code (not the event loop's,
        # the libraries' or the harness's): what a change to the tree moves
        self.own: collections.Counter[str] = collections.Counter()

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            name = f"{Path(code.co_filename).name}:{code.co_name}"
            self.python[name] += 1
            if code.co_filename.startswith(OWN):
                self.own[name] += 1
        elif event == "c_call":
            self.builtins += 1
            self.builtin[getattr(arg, "__qualname__", None) or repr(arg)] += 1

    def collected(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.collections[info["generation"]] += 1

    def report(self, what: str, per: int, top: int) -> str:
        lines = [f"calls {what}: {sum(self.python.values()) / per:.1f} Python "
                 f"({self.own.total() / per:.1f} of the gateway's own), "
                 f"{self.builtins / per:.1f} built-in; collections by generation "
                 + " ".join(f"{n / per:.3f}" for n in self.collections)]
        lines += [f"  {n / per:9.2f}  {name}" for name, n in self.own.most_common(top)]
        lines.append("  built-ins:")
        lines += [f"  {n / per:9.2f}  {name}" for name, n in self.builtin.most_common(top)]
        return "\n".join(lines)


async def counted(step: Any) -> CallCount:
    count = CallCount()
    gc.callbacks.append(count.collected)
    sys.setprofile(count.hook)
    try:
        await step()
    finally:
        sys.setprofile(None)
        gc.callbacks.remove(count.collected)
    return count


async def calls(redis_url: str, top: int) -> str:
    """Function calls a frame (over one batch, after a warm-up batch) and a reply."""
    async with running_app(redis_url, Path(tempfile.mkdtemp())) as (app, _):
        s = await connect(app)
        await s.until("session.created")

        async def batch() -> None:
            for _ in range(PER_BATCH):
                s.send({"type": "input_audio_buffer.append", "audio": FRAME})
            s.send({"type": "session.heartbeat"})
            await s.until("session.heartbeat_ack")

        async def paced() -> None:
            for _ in range(PACED):
                s.send({"type": "input_audio_buffer.append", "audio": FRAME})
                await asyncio.sleep(0.02)  # a client's pace: the worker waits between
            s.send({"type": "session.heartbeat"})
            await s.until("session.heartbeat_ack")

        async def reply() -> None:
            s.send({"type": "response.create"})
            await s.until("response.done")

        await batch()  # warm: first-use imports and caches are not a frame's
        gc.collect()  # and what is alive now frozen out of the collector's sight, as a
        gc.freeze()  # served process does once ready (gateway/heap.py)
        per_frame = await counted(batch)
        await paced()
        per_paced = await counted(paced)
        s.send({"type": "session.update",
                "session": {"instructions": "words=10", "turn_detection": None}})
        await s.until("session.updated")
        await reply()
        per_reply = await counted(reply)
        return "\n".join([per_frame.report("a frame (a batch)", PER_BATCH, top),
                          per_paced.report("a frame (paced)", PACED, top),
                          per_reply.report("a reply", 1, top)])


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
    p.add_argument("--calls", type=int, metavar="N", default=None,
                   help="count calls a frame instead of timing (and show the N most called)")
    args = p.parse_args()
    server = RedisServer().start()
    try:
        if args.calls is not None:
            print(await calls(server.url, args.calls), flush=True)
            return
        print(await frames(server.url, args.batches), flush=True)
        if args.replies:
            print(await replies(server.url, args.replies), flush=True)
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
