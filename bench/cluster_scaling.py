"""Step 4 of ``capacity.py``: a Valkey Cluster of 1, then N primaries, under the
same journal load (``append_events``, the store's own script and arguments), to
measure what one primary carries when it is one of several, and how the
cluster's total scales with its primaries.

Each load process opens its sessions through ``RedisSessionStore`` (which finds
the cluster by its first ping and puts every session in its bucket's slot), then
sends one ``append_events`` per session per round, one pipeline per primary (as
the store's write batcher does). Around the run it reads every
primary's ``INFO commandstats`` and CPU (``/proc``): a primary's ceiling is its
calls over its CPU time, as in step 2.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.cluster import RedisCluster

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]

import proctree  # noqa: E402
import relay  # noqa: E402
from capacity import script_calls  # noqa: E402
from valkey_cluster import ValkeyCluster  # noqa: E402

from duplex.store.embedded import stop_child  # noqa: E402

LOAD_SESSIONS = 64  # sessions per load process


@dataclass
class ClusterRun:
    primaries: int
    rate: float  # append_events per second the cluster reached, every primary together
    busy: list[float]  # each primary's share of a core meanwhile
    us_per_call: list[float]  # each primary's CPU per append_events
    commands_per_core_s: list[float]  # each primary's commands per busy second


async def _open(url: str, owner: str, index: int) -> list[tuple[str, int]]:
    from duplex.store.client import connect
    from duplex.store.redis_store import RedisSessionStore

    store = RedisSessionStore(connect(url), timeout_s=10.0)
    await store.ping()  # finds the cluster
    opened = []
    for k in range(LOAD_SESSIONS):
        record = await store.open_session(
            f"sess_c{index}x{k}", owner=owner, token_digest="0" * 64, config="{}",
            now=time.time(), max_sessions=1_000_000, max_sessions_per_owner=0,
            idle_ttl_s=300.0, grace_s=30.0)
        opened.append((record.session_id, record.incarnation))
    await store.close()
    return opened


def load_worker(url: str, seconds: float, index: int, event: str) -> None:
    """As ``capacity.load_worker``, through a cluster pipeline."""
    from duplex.store import keys
    from duplex.store._scripts import _source
    from duplex.store.redis_store import append_args

    owner = f"load-{index}"
    opened = asyncio.run(_open(url, owner, index))
    cluster = RedisCluster.from_url(url)
    sha = cluster.script_load(_source("_lib") + "\n" + _source("append_events"))
    by_node: dict[str, list[tuple[str, int]]] = {}
    nodes: dict[str, redis.Redis] = {}
    for sid, incarnation in opened:  # as the store's batcher: a pipeline per primary
        node = cluster.get_node_from_key(keys.meta(sid))
        by_node.setdefault(node.name, []).append((sid, incarnation))
        nodes[node.name] = redis.Redis(host=node.host, port=node.port)
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    deadline, seq, done = start_at + seconds, 0, 0
    while time.time() < deadline:
        seq += 1
        pipes = []
        for name, sessions in by_node.items():
            pipe = nodes[name].pipeline(transaction=False)
            for sid, incarnation in sessions:
                args, _ = append_args(sid, owner, incarnation, [(seq, event)],
                                      max_len=20000, now=time.time())
                pipe.evalsha(sha, 3, keys.meta(sid), keys.journal(sid),
                             keys.leases(keys.bucket_of(sid)), *args)
            pipes.append(pipe)
        for pipe in pipes:
            pipe.execute()
        done += len(opened)
    print(f"DONE {done}", flush=True)


def _counts(port: int) -> tuple[int, int]:
    """``capacity.script_calls`` of the primary on ``port``."""
    r = redis.Redis(port=port, decode_responses=True)
    try:
        return script_calls(r)
    finally:
        r.close()


def measure(primaries: int, load_procs: int, seconds: float, capacity_py: str) -> ClusterRun:
    cluster = ValkeyCluster(primaries, replicas=False).start()
    procs: list[subprocess.Popen[str]] = []
    try:
        relay.start_together(
            [[sys.executable, capacity_py, "--cluster-load-worker", str(i), "--url", cluster.url,
              "--load-seconds", str(seconds)] for i in range(load_procs)], REPO, procs)
        nodes = cluster.primaries
        t0 = time.monotonic()
        ticks0 = [proctree.ticks([n.pid]) or 0 for n in nodes]
        counts0 = [_counts(n.port) for n in nodes]
        time.sleep(seconds)
        t1 = time.monotonic()
        ticks1 = [proctree.ticks([n.pid]) or 0 for n in nodes]
        counts1 = [_counts(n.port) for n in nodes]
        for p in procs:
            assert p.stdout is not None
            if not p.stdout.readline().startswith("DONE"):
                raise SystemExit("a cluster load process failed (its error is above)")
            p.wait(30)
    finally:
        for p in procs:
            stop_child(p)
        cluster.close()
    dt = t1 - t0
    busy_s = [(b - a) / relay.CLK_TCK for a, b in zip(ticks0, ticks1, strict=True)]
    calls = [b[0] - a[0] for a, b in zip(counts0, counts1, strict=True)]
    commands = [b[1] - a[1] for a, b in zip(counts0, counts1, strict=True)]
    return ClusterRun(
        primaries=primaries, rate=sum(calls) / dt, busy=[b / dt for b in busy_s],
        us_per_call=[1e6 * b / max(1, c) for b, c in zip(busy_s, calls, strict=True)],
        commands_per_core_s=[c / b if b else 0.0 for c, b in zip(commands, busy_s, strict=True)])


def report(runs: list[ClusterRun], scripts: float, commands: float,
           busy_max: float) -> list[str]:
    """Sessions per primary (at ``busy_max`` of its core, from the per-session
    ``scripts`` and ``commands`` per second measured in step 1) and the scaling."""
    lines = ["Valkey Cluster, the same load on 1 and more primaries (no replicas):"]
    base = runs[0].rate if runs else 0.0
    for run in runs:
        per_primary = [busy_max * min(1e6 / us / scripts, cps / commands)
                       for us, cps in zip(run.us_per_call, run.commands_per_core_s, strict=True)]
        lines.append(
            f"  {run.primaries} primar{'y' if run.primaries == 1 else 'ies'}: "
            f"{run.rate:,.0f} append_events/s reached ({run.rate / base:.2f}x one), "
            f"primaries busy {', '.join(f'{100 * b:.0f}%' for b in run.busy)}; "
            f"{', '.join(f'{u:.1f}' for u in run.us_per_call)} us CPU per call; "
            f"sessions per primary {', '.join(f'{s:,.0f}' for s in per_primary)}, "
            f"{sum(per_primary):,.0f} for the cluster")
    return lines
