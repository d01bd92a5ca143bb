"""Capacity on paper: what 500 and 10,000 concurrent sessions take, from figures
measured here, and the Redis load of a 10-gateway deployment against what one
Valkey primary sustains.

    .venv/bin/python bench/capacity.py [--sessions 16] [--seconds 20] [--workers 1]
                                       [--client-procs 1] [--load-procs 2]
                                       [--load-seconds 8] [--gateways 10] [--json FILE]
                                       [--from-json FILE] [--primaries 1,3]

1. **The gateway's cost per session.** ``relay.py``'s real-time sessions (tone
   plugin: a turn every 3 s, reply audio while the next turn streams in) against
   a gateway it starts, ``--sessions`` of them for ``--seconds``. Around the run
   it reads the embedded Valkey's ``INFO commandstats`` and ``INFO stats``
   (commands, bytes in and out), ``used_memory``, the CPU of the gateway's python
   processes and of Valkey (``/proc``), and their peak RSS (``VmHWM``) against
   the RSS idle at the start. Per session-second, the window includes opening
   and closing the sessions.
2. **What one Valkey primary sustains.** ``--load-procs`` processes journal
   events as fast as they can through the store's own
   ``RedisSessionStore.append_events`` (the Lua script the gateway runs for its
   events), on a fresh embedded Valkey (AOF ``everysec``, unix socket). Valkey
   runs commands on one thread, so its ceiling is one core over its CPU time per
   command: that holds even when the load generators, on the same small
   machine, cannot push it to a full core themselves.
3. **On paper.** Cores, memory, Redis commands and bytes per second for 500 and
   10,000 sessions, and for ``--gateways`` gateways sharing one primary, each
   at 1/``--gateways`` of the sessions. Every input is a figure measured in
   steps 1 and 2 of this run; the one assumption is ``CORE_BUSY_MAX``.

4. **On a Valkey Cluster** (``--primaries 1,3``): the load of step 2 on a cluster
   of each size in turn (``cluster_scaling.py``): what each primary carries in
   sessions, at the per-session costs of step 1, and how the total scales.

This is the gateway's own cost (the tone plugin, no models). How many *cascade*
sessions a box holds at the latency target is ``bench/voice_latency.py
--concurrency 1,2,3,4`` (mouth to ear at each level, next to one session).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

# this tree's duplex, not an installed one, also in the load processes it starts
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import proctree
import relay

from duplex.store.embedded import EmbeddedValkey, stop_child
from gateway.config import GatewayConfig

# A gateway process held real time up to about 60% of a core busy (bench/README.md,
# "Beyond N=32": N=48 held at 62%, N=64 missed at 81%): latency grows before the
# core is full, so cores are planned at this busy fraction, and Redis likewise.
CORE_BUSY_MAX = 0.6
EVENT = json.dumps({"type": "response.output_audio_transcript.delta", "event_id": "e" * 20,
                    "response_id": "resp_" + "r" * 20, "item_id": "item_" + "i" * 20,
                    "output_index": 0, "content_index": 0, "delta": "word " * 8})
LOAD_SESSIONS = 64  # sessions per load process: one append each per round trip


@dataclass
class Measured:
    sessions: int
    workers: int
    held: str
    session_seconds: float
    gateway_cpu_ms: float  # python processes, per session-second
    valkey_cpu_ms: float  # per session-second
    scripts: float  # script calls (EVALSHA/EVAL: the store's requests) per session-second
    commands: float  # every Valkey command per session-second, those inside scripts too
    bytes_in: float  # to Valkey, per session-second
    bytes_out: float  # from Valkey, per session-second
    rss_kb: float  # gateway peak RSS per session
    idle_rss_mb: float  # gateway RSS with no session (all its python processes)
    valkey_kb_s: float  # Valkey used_memory growth per session-second (the journal)
    by_command: dict[str, float]  # commands per session-second, by name
    ceiling_scripts: float = 0.0  # append_events per second one Valkey core sustains
    ceiling_us: float = 0.0  # Valkey CPU per append_events
    ceiling_commands: float = 0.0  # every command (inside scripts too) per core-second
    load_rate: float = 0.0  # what the load generators reached
    load_valkey_busy: float = 0.0  # Valkey's share of a core meanwhile
    # the reaper's look at every bucket (ZRANGEBYSCORE in due_buckets.lua), per gateway
    # process per second: a cost of the process, not of its sessions
    sweep_commands_s: float = 0.0


def valkey_counts(r: redis.Redis) -> tuple[dict[str, int], int, int, int]:
    stats = r.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    net = r.info("stats")
    return (calls, int(net["total_net_input_bytes"]), int(net["total_net_output_bytes"]),
            int(r.info("memory")["used_memory"]))


def measure_gateway(args: argparse.Namespace, tmp: Path) -> Measured:
    extra = ["--workers", str(args.workers)] if args.workers > 1 else []
    gw = relay.start_gateway(tmp / "gw", extra, None)
    try:
        store = proctree.store_child(gw.pid)
        pids = (gw.pid, store)
        r = redis.Redis(unix_socket_path=str(tmp / "gw" / "valkey" / "valkey.sock"))
        idle_kb = relay.server_rss_kb(pids) or 0
        calls0, in0, out0, mem0 = valkey_counts(r)
        run = relay.run_one("gateway", f"ws://{gw.match}/v1/realtime", pids, args.sessions,
                            args.seconds, args.client_procs, False)
        calls1, in1, out1, mem1 = valkey_counts(r)
        peak_kb = relay.server_rss_kb(pids, "VmHWM") or 0
    finally:
        gw.stop()
    if run.failure:
        raise SystemExit(f"the gateway run failed: {run.failure}")
    ss, n = run.session_seconds, args.sessions
    # INFO itself is a command (and bytes): leave the bench's own reads out
    by_command = {k: (v - calls0.get(k, 0)) / ss for k, v in calls1.items()
                  if k != "info" and v > calls0.get(k, 0)}
    # the reaper's sweep reads every bucket whatever the sessions: per process, not session
    sweep = by_command.pop("zrangebyscore", 0.0)
    held, why = run.held()
    return Measured(
        sessions=n, workers=args.workers, held="yes" if held else f"NO ({why})",
        session_seconds=ss, gateway_cpu_ms=1000 * run.server_cpu_s / ss,
        valkey_cpu_ms=1000 * (run.store_cpu_s or 0.0) / ss, commands=sum(by_command.values()),
        scripts=by_command.get("evalsha", 0.0) + by_command.get("eval", 0.0),
        bytes_in=(in1 - in0) / ss, bytes_out=(out1 - out0) / ss,
        rss_kb=(peak_kb - idle_kb) / n, idle_rss_mb=idle_kb / 1024,
        valkey_kb_s=(mem1 - mem0) / 1024 / ss, by_command=by_command,
        sweep_commands_s=sweep * ss / (run.session_seconds / n) / max(1, args.workers))


# -- step 2: one Valkey primary at full load ------------------------------------------


async def open_load_sessions(url: str, owner: str, index: int) -> list[tuple[str, int]]:
    """Open ``LOAD_SESSIONS`` sessions through the store, as the gateway does."""
    from duplex.store.client import connect
    from duplex.store.redis_store import RedisSessionStore

    store = RedisSessionStore(connect(url), timeout_s=10.0)
    opened = []
    for k in range(LOAD_SESSIONS):
        record = await store.open_session(
            f"sess_load{index}x{k}", owner=owner, token_digest="0" * 64, config="{}",
            now=time.time(), max_sessions=100_000, max_sessions_per_owner=0,
            idle_ttl_s=300.0, grace_s=30.0)
        opened.append((record.session_id, record.incarnation))
    await store.close()
    return opened


def load_worker(url: str, seconds: float, index: int) -> None:
    """Journal one event on each of its sessions per round trip (a pipeline of
    ``append_events`` script calls, exactly the arguments the store passes) until
    ``seconds`` pass; print how many."""
    from duplex.store import keys
    from duplex.store._scripts import _source
    from duplex.store.redis_store import append_args

    owner = f"load-{index}"
    opened = asyncio.run(open_load_sessions(url, owner, index))
    r = redis.Redis.from_url(url)
    sha = r.script_load(_source("_lib") + "\n" + _source("append_events"))
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    time.sleep(max(0.0, start_at - time.time()))
    deadline, seq, done = start_at + seconds, 0, 0
    while time.time() < deadline:
        seq += 1
        pipe = r.pipeline(transaction=False)
        for sid, incarnation in opened:
            args, _ = append_args(sid, owner, incarnation, [(seq, EVENT)], max_len=20000,
                                  now=time.time())
            pipe.evalsha(sha, 3, keys.meta(sid), keys.journal(sid),
                        keys.leases(keys.bucket_of(sid)), *args)
        pipe.execute()
        done += len(opened)
    print(f"DONE {done}", flush=True)


def measure_store(args: argparse.Namespace, tmp: Path, m: Measured) -> None:
    server = EmbeddedValkey(tmp / "load")
    url = server.start()
    procs: list[subprocess.Popen[str]] = []
    try:
        relay.start_together(
            [[sys.executable, __file__, "--load-worker", str(i), "--url", url,
              "--load-seconds", str(args.load_seconds)] for i in range(args.load_procs)],
            relay.REPO, procs)
        assert server.pid is not None
        t0, c0 = time.monotonic(), proctree.ticks([server.pid]) or 0
        r = redis.Redis(unix_socket_path=str(server.socket_path))
        calls0, all0 = script_calls(r)
        time.sleep(args.load_seconds)
        t1, c1 = time.monotonic(), proctree.ticks([server.pid]) or 0
        calls1, all1 = script_calls(r)
        for p in procs:
            assert p.stdout is not None
            if not p.stdout.readline().startswith("DONE"):
                raise SystemExit("a load process failed (its error is above)")
            p.wait(30)
    finally:
        for p in procs:
            stop_child(p)
        server.stop()
    busy_s = (c1 - c0) / relay.CLK_TCK
    m.load_rate = (calls1 - calls0) / (t1 - t0)
    m.load_valkey_busy = busy_s / (t1 - t0)
    m.ceiling_us = 1e6 * busy_s / max(1, calls1 - calls0)
    m.ceiling_scripts = 1e6 / m.ceiling_us
    m.ceiling_commands = (all1 - all0) / busy_s


def script_calls(r: redis.Redis) -> tuple[int, int]:
    """EVALSHA calls, and every command (those run inside scripts too; not INFO). A
    Valkey that has run no EVALSHA yet (a cluster primary before the load starts, or
    when no session's slot is on it) has none to count."""
    stats = r.info("commandstats")
    total = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0)), total


# -- step 3: on paper -----------------------------------------------------------------


def journal_mb(m: Measured) -> float:
    """Valkey memory one session holds in steady state: its journal grows at the
    measured rate and is kept ``--resume-replay-ttl-s`` (bounded by
    ``--resume-replay-max-bytes``)."""
    cfg = GatewayConfig()
    return min(m.valkey_kb_s * cfg.resume_replay_ttl_s / 1024,
               cfg.resume_replay_max_bytes / 2**20)


def need(m: Measured, sessions: int) -> dict[str, float]:
    """What ``sessions`` concurrent sessions take, at the measured per-session costs."""
    cores = sessions * m.gateway_cpu_ms / 1000 / CORE_BUSY_MAX
    processes = max(1, round(cores + 0.5))  # one gateway process per core, rounded up
    per_process_mb = m.idle_rss_mb / (m.workers + (m.workers > 1))  # a parent counts one
    return {
        "gateway cores": cores,
        "gateway processes (one per core)": processes,
        "gateway memory GB": (sessions * m.rss_kb / 1024 + processes * per_process_mb) / 1024,
        "Redis script calls/s": sessions * m.scripts,
        "Redis commands/s (inside scripts too)": sessions * m.commands,
        "Redis MB/s in": sessions * m.bytes_in / 1e6,
        "Redis MB/s out": sessions * m.bytes_out / 1e6,
        "Redis memory GB (journals)": sessions * journal_mb(m) / 1024,
        "Redis primary cores (commands)": sessions * m.commands / m.ceiling_commands,
    }


def one_primary(m: Measured) -> float:
    """Sessions one primary carries at ``CORE_BUSY_MAX`` of its core."""
    return CORE_BUSY_MAX * min(m.ceiling_commands / m.commands,
                               m.ceiling_scripts / m.scripts)


def fleet(m: Measured, gateways: int, total: int) -> list[str]:
    """One primary under ``gateways`` gateways of ``total // gateways`` sessions each."""
    each = total // gateways
    by_commands = total * m.commands / m.ceiling_commands
    by_scripts = total * m.scripts / m.ceiling_scripts
    worst = max(by_commands, by_scripts)
    verdict = "within" if worst <= CORE_BUSY_MAX else "OVER"
    return [
        f"{gateways} gateways x {each:,} sessions = {total:,} sessions on one Valkey primary:",
        f"  {total * m.scripts:,.0f} script calls/s ({gateways} x {each * m.scripts:,.0f}), "
        f"{total * m.commands:,.0f} commands/s counting those inside scripts",
        f"  the primary's one core: {100 * by_commands:.0f}% by commands, "
        f"{100 * by_scripts:.0f}% by script calls (at the append_events ceiling); "
        f"{verdict} the {100 * CORE_BUSY_MAX:.0f}% planned",
        f"  network into / out of the primary: {total * m.bytes_in * 8 / 1e9:.2f} / "
        f"{total * m.bytes_out * 8 / 1e9:.3f} Gbit/s; journals {total * journal_mb(m) / 1024:,.1f}"
        f" GB of memory",
        f"  primaries that load needs at {100 * CORE_BUSY_MAX:.0f}% busy: "
        f"{max(1, math.ceil(worst / CORE_BUSY_MAX))} (as a Valkey Cluster: --primaries); "
        f"one primary carries about "
        f"{one_primary(m):,.0f} sessions",
    ]


def report(m: Measured, gateways: int) -> None:
    print(f"\nmeasured, {m.sessions} sessions on {m.workers} gateway process(es), "
          f"{m.session_seconds:.0f} session-seconds (held real time: {m.held}):")
    print(f"  gateway CPU {m.gateway_cpu_ms:.1f} ms per session-second; peak RSS "
          f"{m.rss_kb:.0f} KB per session over {m.idle_rss_mb:.0f} MB idle")
    print(f"  Valkey per session-second: {m.scripts:.2f} script calls, {m.commands:.1f} "
          f"commands (inside scripts too), {m.bytes_in:,.0f} B in, {m.bytes_out:,.0f} B out, "
          f"{m.valkey_cpu_ms:.2f} ms CPU, memory +{m.valkey_kb_s:.1f} KB "
          f"(journal; {journal_mb(m):.1f} MB per session once it is trimmed)")
    mix = ", ".join(f"{k} {v:.2f}" for k, v in sorted(m.by_command.items(),
                                                    key=lambda kv: -kv[1])[:8])
    print(f"  commands per session-second by name: {mix}")
    print(f"  the reaper's sweep, per gateway process: {m.sweep_commands_s:,.0f} commands/s "
          f"(ZRANGEBYSCORE of every bucket's two indexes, in one script call a primary)")
    print(f"  one Valkey primary: {m.load_rate:,.0f} append_events/s reached, Valkey "
          f"{100 * m.load_valkey_busy:.0f}% of a core busy: {m.ceiling_us:.1f} us CPU per "
          f"call, so {m.ceiling_scripts:,.0f} calls/s or {m.ceiling_commands:,.0f} "
          f"commands/s at a full core")
    print(f"\non paper (gateway cores planned at {100 * CORE_BUSY_MAX:.0f}% busy):")
    sizes = (500, 10_000)
    rows = {n: need(m, n) for n in sizes}
    print(f"  {'sessions':<40}" + "".join(f"{n:>14,}" for n in sizes))
    for key in rows[sizes[0]]:
        print(f"  {key:<40}" + "".join(f"{rows[n][key]:>14,.1f}" for n in sizes))
    print()
    for line in fleet(m, gateways, 10_000):
        print(line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=16, help="sessions in step 1")
    p.add_argument("--seconds", type=float, default=20.0, help="streaming time in step 1")
    p.add_argument("--workers", type=int, default=1, help="gateway processes in step 1")
    p.add_argument("--client-procs", type=int, default=1, help="client processes in step 1")
    p.add_argument("--load-procs", type=int, default=2, help="load processes in step 2")
    p.add_argument("--load-seconds", type=float, default=8.0, help="load time in step 2")
    p.add_argument("--gateways", type=int, default=10, help="gateways sharing one primary")
    p.add_argument("--json", metavar="FILE", help="also write the measured figures here")
    p.add_argument("--from-json", metavar="FILE",
                   help="measure nothing: redo the paper from a --json file")
    p.add_argument("--primaries", metavar="N,N",
                   help="also run step 2's load on a Valkey Cluster of each size")
    p.add_argument("--load-worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--cluster-load-worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.load_worker is not None:
        load_worker(args.url, args.load_seconds, args.load_worker)
        return 0
    if args.cluster_load_worker is not None:
        import cluster_scaling
        cluster_scaling.load_worker(args.url, args.load_seconds, args.cluster_load_worker, EVENT)
        return 0
    if args.from_json:
        report(Measured(**json.loads(Path(args.from_json).read_text())), args.gateways)
        return 0
    print(f"capacity {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average "
          f"{relay.loadavg()}, {os.cpu_count()} CPUs", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="capacity-"))
    try:
        m = measure_gateway(args, tmp)
        measure_store(args, tmp, m)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(m, args.gateways)
    if args.primaries:
        import cluster_scaling
        runs = [cluster_scaling.measure(int(n), args.load_procs, args.load_seconds, __file__)
                for n in args.primaries.split(",")]
        print()
        for line in cluster_scaling.report(runs, m.scripts, m.commands, CORE_BUSY_MAX):
            print(line)
    print(f"load average now {relay.loadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(m), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
