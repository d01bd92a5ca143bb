"""Resume benchmark: what a ``session.resume`` costs, and how fast one gateway
process journals events, and what a resume relayed through another process
costs, each next to a baseline measured in the same run.

    .venv/bin/python bench/resume.py [--quick] [--resumes N] [--seconds S]

It starts its own gateway (``python -m gateway.cli serve --port 0 --plugin tone
--data-dir <tmp>``, embedded Valkey on ``<tmp>/valkey/valkey.sock``) on
127.0.0.1, runs three parts (the third with a second gateway on the same
Valkey), prints tables, stops the gateways and removes the directory. The
full run takes about a minute; ``--quick`` (a smoke test, well under 30 s)
does fewer resumes and shorter throughput windows.

How to read it
==============

Every figure is printed next to a baseline taken against the same gateway /
Valkey in the same run, on the same machine (client, gateway and Valkey share
its cores, so the figures are relative, not absolute capacity numbers). The
header prints the load average before and after: if other work was running,
part 2 in particular reads low and noisy.

Part 1: resume latency, journals of K = 10, 100, 1,000 events to replay.
  Per K, one session gets exactly K ``session.heartbeat`` commands (each makes
  exactly one journaled event, ``session.heartbeat_ack``; checked through
  ``server_event_seq``), so the journal holds seq 1 (``session.created``) ..
  K+1. Then, repeatedly: drop the socket abnormally (``transport.abort()``, no
  close frame, so the session detaches instead of ending), wait 50 ms (untimed,
  so the resume meets a detached session, the usual case), open
  ``/v1/realtime?resume=<id>``, send ``session.resume`` with the latest rotated
  token and cursor 1, and read ``session.resumed`` then the K replayed events.
  Each resume is checked: ``replay_count`` == K and the events are exactly seq
  2 .. K+1, in order. Columns (ms, p50 / p99):
    open           TCP connect + WebSocket upgrade done
    resumed        ``session.resumed`` received
    last           the K-th (last) replayed event received: the resume
                   latency (these three timed from just before the connect)
    1st gap        resumed -> the first replayed event (a steady ~40 ms here
                   is the Linux delayed-ACK timer: Nagle holding the replay
                   back in the gateway's socket, not work)
    replay         resumed -> last
    client CPU     this process's CPU time during 'replay': the benchmark
                   client's own share of it (it shares the cores)
  'resumed - open' is the server's resume work: token check, the CAS on the
  attachment generation (resume.lua), journal bounds, one send.
  Baselines, same run:
    plain connect  a fresh ``/v1/realtime`` connect to the same gateway until
                   ``session.created`` (open_session + journaling one event);
                   'last - plain' (p50 - p50) is what a resume costs over a
                   plain connect.
    raw XRANGE     the same K journal entries read straight from Valkey with
                   redis-py (same client settings as the gateway, 500 entries
                   per XRANGE like ``Journal.read_after``); 'replay - raw'
                   (p50 - p50) is the replay overhead over the store.
  Samples of the three are interleaved (one plain connect, one resume per K,
  one XRANGE per K, repeat), so drift hits them alike. p99 over ~40 samples is
  close to the worst sample; read it as "tail", not as a precise quantile.

Part 2: events journaled per second by one gateway process.
  N = 1, 4, 16 concurrent sessions, each sending one command as fast as it
  can, pipelined (up to WINDOW unanswered per session, below the gateway's
  512-command inbox bound, so no ``input_backpressure``), reading the
  answers concurrently. Two commands, each answered by exactly one event:
    session.heartbeat          -> session.heartbeat_ack; the gateway also
                                  renews the lease on every heartbeat (a
                                  second EVALSHA round trip per event)
    input_audio_buffer.clear   -> input_audio_buffer.cleared; the bare path:
                                  one ``append_events`` EVALSHA per event
  Each answer is one event stamped, journaled, then sent; events/s is counted
  at the client over a window after a short warm-up. 'EVALSHA/ev' is Valkey's
  own count of EVALSHA calls over the window divided by the events. Baseline:
  a raw ``XADD`` loop (one awaited XADD per event, MAXLEN ~ like the journal,
  a payload the size of a heartbeat ack) from one asyncio redis-py client in
  this process, with 1 task and with N tasks, against the same Valkey.
  CPU% columns are each process's CPU time over the window (100% = one core),
  showing which process the cores went to.

Part 3: a resume that reaches another process (docs/architecture.md §8).
  A second gateway B on the same Valkey. One session owned by A (K = 100
  events replayed per resume); resumes alternate straight to A and through B,
  which relays the socket to A frame for frame (``gateway/owner_relay.py``).
  After each resume, 5 ``session.heartbeat`` round trips on the new socket.
  The direct rows are the baseline: the difference is what the relay costs,
  once per resume and on every frame after.

Figures, not a verdict: a row is only a measurement under the stated criterion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from duplex.store import keys  # noqa: E402
from duplex.store.embedded import stop_child  # noqa: E402

READY = re.compile(r"duplex-gateway ready: http://([^/\s]+)/")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SIZES = (10, 100, 1000)
SESSION_COUNTS = (1, 4, 16)
WINDOW = 64  # unacknowledged heartbeats per session (the inbox holds 512)
REPLAY_CHUNK = 500  # entries per XRANGE, as Journal.read_after reads them
DROP_PAUSE_S = 0.05  # untimed pause between an abort and the next resume
IO_TIMEOUT_S = 15.0
HEARTBEAT = json.dumps({"type": "session.heartbeat"})
DELAYED_ACK_MS = (30.0, 50.0)  # Linux's delayed-ACK timer is ~40 ms


# -- small utilities -----------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """The q-th percentile, linear between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def ms(seconds: float) -> float:
    return seconds * 1000.0


def seq_of(text: str) -> int:
    """``server_event_seq`` of a wire event; the journal stamps it as the last field."""
    tail = text.rfind('"server_event_seq":')
    if tail < 0:
        raise AssertionError(f"event without server_event_seq: {text[:120]}")
    return int(text[tail + len('"server_event_seq":'):].rstrip("} \n"))


def cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def child_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def proc_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class CpuMeter:
    """CPU% (100 = one core) of a few processes between start() and stop()."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self._t0 = 0.0
        self._ticks0: dict[str, int | None] = {}
        self._self0 = 0.0
        self.result: dict[str, float] = {}

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._ticks0 = {k: (cpu_ticks(p) if p else None) for k, p in self.pids.items()}
        t = os.times()
        self._self0 = t.user + t.system

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self._t0
        out: dict[str, float] = {}
        for k, p in self.pids.items():
            before = self._ticks0.get(k)
            after = cpu_ticks(p) if p else None
            if before is not None and after is not None:
                out[k] = 100.0 * (after - before) / CLK_TCK / wall
        t = os.times()
        out["client"] = 100.0 * (t.user + t.system - self._self0) / wall
        self.result = out
        return out


def machine() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cores} cores ({model}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"
    except OSError:
        return "n/a"


def table(headers: list[str], rows: list[list[str]], left: int = 1, indent: str = "  ") -> str:
    """Columns before ``left`` are left-aligned (labels), the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return indent + "  ".join(c.ljust(w) if i < left else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(headers), line(["-" * w for w in widths]),
                      *(line(r) for r in rows)])


def f1(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}"


# -- the gateway under test --------------------------------------------------------


class Gateway:
    def __init__(self, data_dir: Path, *, redis_url: str | None = None,
                 log_name: str = "gateway.log") -> None:
        self.data_dir = data_dir
        self.log_path = data_dir / log_name
        self.cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", "0",
                    "--plugin", "tone", "--data-dir", str(data_dir)]
        if redis_url is not None:  # a second process on the first one's Valkey
            self.cmd += ["--redis-url", redis_url]
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    @property
    def url(self) -> str:
        return f"ws://{self.address}/v1/realtime"

    @property
    def valkey_socket(self) -> Path:
        return self.data_dir / "valkey" / "valkey.sock"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def valkey_pid(self) -> int | None:
        if self.proc is None:
            return None
        for child in child_pids(self.proc.pid):
            if "valkey" in proc_name(child) or "redis" in proc_name(child):
                return child
        return None

    def start(self, timeout_s: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items()
               if k != "REDIS_URL" and not k.startswith("DUPLEX_GATEWAY_")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text(errors="replace"))
            if match:
                self.address = match.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the gateway did not become ready:\n" + self.log_tail())

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def complaints(self) -> list[str]:
        """WARNING/ERROR lines of the gateway's log (its own and uvicorn's)."""
        with contextlib.suppress(OSError):
            return [line for line in self.log_path.read_text(errors="replace").splitlines()
                    if re.search(r"\b(WARNING|ERROR|CRITICAL|Traceback)\b", line)]
        return []

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)


# -- part 1: resume latency ----------------------------------------------------------


@dataclass
class Journaled:
    """A session with a known journal, re-attached again and again."""

    k: int
    session_id: str = ""
    token: str = ""
    last_seq: int = 0
    ws: Any = None
    event_bytes: int = 0  # of the K events that each resume replays

    @property
    def cursor(self) -> int:
        return self.last_seq - self.k


@dataclass
class ResumeSamples:
    open: list[float] = field(default_factory=list)
    resumed: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)  # raw XRANGE of the same K entries
    client_cpu: list[float] = field(default_factory=list)  # this process, resumed -> last

    @property
    def replay(self) -> list[float]:
        return [b - a for a, b in zip(self.resumed, self.last, strict=True)]

    @property
    def gap(self) -> list[float]:
        return [b - a for a, b in zip(self.resumed, self.first, strict=True)]


@dataclass
class ConnectSamples:
    open: list[float] = field(default_factory=list)
    created: list[float] = field(default_factory=list)


async def _connect(url: str) -> Any:
    from websockets.asyncio.client import connect
    return await connect(url, max_size=None, open_timeout=IO_TIMEOUT_S)


async def _recv(ws: Any) -> str:
    msg = await asyncio.wait_for(ws.recv(), IO_TIMEOUT_S)
    if not isinstance(msg, str):
        raise AssertionError("binary frame from the gateway")
    return msg


async def prepare(url: str, k: int) -> Journaled:
    """Open a session and give it exactly ``k`` journaled events after session.created."""
    s = Journaled(k)
    s.ws = await _connect(url)
    created = json.loads(await _recv(s.ws))
    assert created["type"] == "session.created", created
    s.session_id, s.token, s.last_seq = (created["session"]["id"], created["resume_token"],
                                         created["server_event_seq"])
    sent = 0
    got = 0
    while got < k:  # pipelined in windows, well under the inbox bound
        while sent < k and sent - got < WINDOW:
            await s.ws.send(HEARTBEAT)
            sent += 1
        text = await _recv(s.ws)
        ev = json.loads(text)
        if ev["type"] != "session.heartbeat_ack":
            raise AssertionError(f"unexpected event while preparing: {text[:200]}")
        if ev["server_event_seq"] != s.last_seq + 1:
            raise AssertionError(f"seq {ev['server_event_seq']} after {s.last_seq}")
        s.last_seq = ev["server_event_seq"]
        s.event_bytes += len(text.encode())
        got += 1
    assert s.cursor == 1 and s.last_seq == k + 1, (s.cursor, s.last_seq)
    return s


async def resume_once(url: str, s: Journaled, samples: ResumeSamples | None) -> None:
    """Drop the socket abnormally, resume, check the replay; record the times."""
    s.ws.transport.abort()
    s.ws = None
    await asyncio.sleep(DROP_PAUSE_S)
    t0 = time.perf_counter()
    ws = await _connect(f"{url}?resume={s.session_id}")
    t_open = time.perf_counter()
    await ws.send(json.dumps({"type": "session.resume", "resume_token": s.token,
                              "last_received_server_event_seq": s.cursor}))
    text = await _recv(ws)
    t_resumed = time.perf_counter()
    cpu_resumed = time.process_time()
    ev = json.loads(text)
    if ev["type"] != "session.resumed":
        raise AssertionError(f"expected session.resumed, got {text[:300]}")
    if ev["replay_count"] != s.k or ev["last_server_event_seq"] != s.last_seq:
        raise AssertionError(f"resumed with replay_count {ev['replay_count']}, "
                             f"last {ev['last_server_event_seq']}; expected {s.k}, {s.last_seq}")
    s.token = ev["resume_token"]
    s.ws = ws
    t_first = 0.0
    expect = s.cursor + 1
    while expect <= s.last_seq:
        text = await _recv(ws)
        if expect == s.cursor + 1:
            t_first = time.perf_counter()
        seq = seq_of(text)
        if seq != expect:
            raise AssertionError(f"replayed seq {seq}, expected {expect}: {text[:200]}")
        expect += 1
    t_last = time.perf_counter()
    cpu_last = time.process_time()
    if samples is not None:
        samples.client_cpu.append(ms(cpu_last - cpu_resumed))
        samples.open.append(ms(t_open - t0))
        samples.resumed.append(ms(t_resumed - t0))
        samples.first.append(ms(t_first - t0))
        samples.last.append(ms(t_last - t0))


async def connect_once(url: str, samples: ConnectSamples | None) -> None:
    """The baseline: a fresh session until session.created, then a normal close (ends it)."""
    t0 = time.perf_counter()
    ws = await _connect(url)
    t_open = time.perf_counter()
    text = await _recv(ws)
    t_created = time.perf_counter()
    if json.loads(text)["type"] != "session.created":
        raise AssertionError(f"expected session.created, got {text[:300]}")
    await ws.close()
    if samples is not None:
        samples.open.append(ms(t_open - t0))
        samples.created.append(ms(t_created - t0))


async def xrange_once(redis: Any, s: Journaled, samples: ResumeSamples | None) -> None:
    """The baseline: the same K journal entries, straight from Valkey."""
    key = keys.journal(s.session_id)
    t0 = time.perf_counter()
    got: list[Any] = []
    start = f"({s.cursor}-1"
    while len(got) < s.k:
        chunk = await redis.xrange(key, start, "+", count=REPLAY_CHUNK)
        if not chunk:
            break
        got.extend(chunk)
        start = f"({chunk[-1][0]}"
    t1 = time.perf_counter()
    if len(got) != s.k:
        raise AssertionError(f"XRANGE returned {len(got)} entries, expected {s.k}")
    if samples is not None:
        samples.raw.append(ms(t1 - t0))


async def part1(gw: Gateway, redis: Any, resumes: int) -> str:
    url = gw.url
    sessions = {k: await prepare(url, k) for k in SIZES}
    # warm-up (unrecorded): code paths, pools, the client's imports
    for _ in range(3):
        await connect_once(url, None)
        for k in SIZES:
            await resume_once(url, sessions[k], None)
            await xrange_once(redis, sessions[k], None)
    plain = ConnectSamples()
    res = {k: ResumeSamples() for k in SIZES}
    for _ in range(resumes):
        await connect_once(url, plain)
        for k in SIZES:
            await resume_once(url, sessions[k], res[k])
            await xrange_once(redis, sessions[k], res[k])
    for s in sessions.values():
        await s.ws.close()  # code 1000: the session ends

    out = [
        "Part 1: resume latency (ms; p50 / p99; timed from just before the TCP connect)",
        f"  criterion: {resumes} resumes per K, each after an abnormal drop (transport.abort())"
        f" + {ms(DROP_PAUSE_S):.0f} ms untimed; each replay checked to be exactly seq 2..K+1.",
        "  'last' = the resume latency; 'replay' = resumed -> last; '1st gap' = resumed ->"
        " first replayed event;",
        "  'client CPU' = this benchmark's own CPU time during 'replay' (its share of that"
        " time, on a shared machine).",
        "",
    ]
    headers = ["K (bytes)", "open", "resumed", "1st gap", "replay", "client CPU", "last",
               "plain connect", "raw XRANGE", "last - plain", "replay - raw"]
    rows: list[list[str]] = []
    for k in SIZES:
        r = res[k]
        row = [f"{k} ({sessions[k].event_bytes // 1024 or sessions[k].event_bytes}"
               f"{' KiB' if sessions[k].event_bytes >= 1024 else ' B'})"]
        for xs in (r.open, r.resumed, r.gap, r.replay, r.client_cpu, r.last, plain.created,
                   r.raw):
            row.append(f"{f1(pct(xs, 50))} / {f1(pct(xs, 99))}")
        row.append(f1(pct(r.last, 50) - pct(plain.created, 50)))
        row.append(f1(pct(r.replay, 50) - pct(r.raw, 50)))
        rows.append(row)
    out.append(table(headers, rows))
    out.append("")
    out.append(f"  baseline 'plain connect' = fresh /v1/realtime until session.created "
               f"(open alone: {f1(pct(plain.open, 50))} / {f1(pct(plain.open, 99))});"
               " 'raw XRANGE' = redis-py reading the same K entries,")
    out.append(f"  {REPLAY_CHUNK} per call, over the Valkey unix socket. The two difference "
               "columns are p50 - p50.")
    gaps = [pct(res[k].gap, 50) for k in SIZES]
    if all(DELAYED_ACK_MS[0] <= g <= DELAYED_ACK_MS[1] for g in gaps):
        out.append("  note: the resumed -> first-replayed gap sits at the ~40 ms Linux delayed-ACK"
                   " timer for every K: the events sent after session.resumed wait in")
        out.append("  the gateway's socket for the client's ACK (Nagle's algorithm), not for Redis"
                   " (compare the raw XRANGE column). Check that accepted sockets")
        out.append("  get TCP_NODELAY: asyncio sets it only when the listener was made with "
                   "IPPROTO_TCP (gateway/serving.py listen).")
    return "\n".join(out)


# -- part 3: a resume relayed to the owner on another process ---------------------


async def heartbeat_rtt(s: Journaled) -> float:
    """One heartbeat -> heartbeat_ack round trip on the session's socket (ms)."""
    t0 = time.perf_counter()
    await s.ws.send(HEARTBEAT)
    ev = json.loads(await _recv(s.ws))
    if ev["type"] != "session.heartbeat_ack":
        raise AssertionError(f"expected session.heartbeat_ack, got {ev['type']}")
    s.last_seq = ev["server_event_seq"]
    return ms(time.perf_counter() - t0)


async def part3(owner: Gateway, other: Gateway, resumes: int) -> str:
    k = 100
    s = await prepare(owner.url, k)
    direct, relayed = ResumeSamples(), ResumeSamples()
    rtt: dict[str, list[float]] = {"direct": [], "relayed": []}
    for i in range(resumes + 3):  # 3 unrecorded warm-ups, then interleaved samples
        for name, gw, samples in (("direct", owner, direct), ("relayed", other, relayed)):
            await resume_once(gw.url, s, samples if i >= 3 else None)
            for _ in range(5):
                took = await heartbeat_rtt(s)
                if i >= 3:
                    rtt[name].append(took)
    await s.ws.close()
    headers = ["path", "open", "resumed", "last (K=100)", "heartbeat RTT"]
    rows = [[label, *(f"{f1(pct(xs, 50))} / {f1(pct(xs, 99))}"
                      for xs in (r.open, r.resumed, r.last, rtt[name]))]
            for label, name, r in (("direct to the owner", "direct", direct),
                                   ("via another process", "relayed", relayed))]
    return "\n".join([
        "Part 3: a resume that reaches a process not owning the session (ms; p50 / p99)",
        f"  criterion: one session owned by gateway A; {resumes} resumes each straight to A "
        "and through gateway B (B relays the socket to A), interleaved;",
        "  after each, 5 heartbeat round trips on the resumed socket. Each resume replays "
        "the last K = 100 events.",
        "",
        table(headers, rows),
        "",
        f"  relay cost, p50 - p50: resume {f1(pct(relayed.last, 50) - pct(direct.last, 50))} ms,"
        f" heartbeat round trip {f1(pct(rtt['relayed'], 50) - pct(rtt['direct'], 50))} ms",
    ])


# -- part 2: events journaled per second ------------------------------------------


@dataclass
class Window:
    warmup_s: float
    seconds: float


@dataclass
class Rate:
    load: str
    sessions: int
    per_s: float
    cpu: dict[str, float]
    scripts_per_event: float = float("nan")  # EVALSHA calls per event (gateway rows)
    errors: int = 0


LOADS = {  # command -> the one event it is answered with
    "session.heartbeat": "session.heartbeat_ack",
    "input_audio_buffer.clear": "input_audio_buffer.cleared",
}


async def _evalsha_calls(redis: Any) -> int:
    stats = await redis.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_evalsha"))


async def _measure(window: Window, counter: Callable[[], int], meter: CpuMeter,
                   stop: asyncio.Event, redis: Any) -> tuple[float, dict[str, float], float]:
    await asyncio.sleep(window.warmup_s)
    s0 = await _evalsha_calls(redis)
    n0, t0 = counter(), time.perf_counter()
    meter.start()
    await asyncio.sleep(window.seconds)
    n1, t1 = counter(), time.perf_counter()
    cpu = meter.stop()
    stop.set()
    s1 = await _evalsha_calls(redis)
    events = n1 - n0
    return events / (t1 - t0), cpu, (s1 - s0) / events if events else float("nan")


async def gateway_rate(gw: Gateway, redis: Any, command: str, n: int, window: Window) -> Rate:
    message = json.dumps({"type": command})
    answer = f'"type":"{LOADS[command]}"'
    conns = []
    for _ in range(n):
        ws = await _connect(gw.url)
        created = json.loads(await _recv(ws))
        assert created["type"] == "session.created", created
        conns.append(ws)
    acks = 0
    errors = 0
    stop = asyncio.Event()

    async def session(ws: Any) -> None:
        nonlocal acks, errors
        credit = asyncio.Semaphore(WINDOW)
        sent = 0
        got = 0

        async def sender() -> None:
            nonlocal sent
            while not stop.is_set():
                await credit.acquire()
                if stop.is_set():
                    break
                await ws.send(message)
                sent += 1

        task = asyncio.create_task(sender())
        try:
            while not (stop.is_set() and task.done() and got >= sent):
                try:
                    text = await asyncio.wait_for(ws.recv(), 0.5 if stop.is_set() else
                                                  IO_TIMEOUT_S)
                except TimeoutError:
                    if stop.is_set():
                        break  # drained, or stuck: the close below copes
                    raise
                got += 1
                credit.release()
                if answer in text:
                    acks += 1
                else:
                    errors += 1
        finally:
            stop.set()
            credit.release()
            await task

    meter = CpuMeter({"gateway": gw.pid, "valkey": gw.valkey_pid()})
    workers = [asyncio.create_task(session(ws)) for ws in conns]
    rate, cpu, scripts = await _measure(window, lambda: acks, meter, stop, redis)
    await asyncio.gather(*workers)
    for ws in conns:
        await ws.close()  # code 1000: the session ends
    return Rate(command, n, rate, cpu, scripts, errors)


async def raw_xadd_rate(gw: Gateway, redis: Any, tasks: int, payload: str,
                        window: Window) -> Rate:
    count = 0
    stop = asyncio.Event()
    keys = [f"bench:{{resume-xadd-{i}}}:journal" for i in range(tasks)]

    async def loop(key: str) -> None:
        nonlocal count
        while not stop.is_set():
            await redis.xadd(key, {"event": payload}, maxlen=20000, approximate=True)
            count += 1

    meter = CpuMeter({"gateway": gw.pid, "valkey": gw.valkey_pid()})
    workers = [asyncio.create_task(loop(k)) for k in keys]
    rate, cpu, _ = await _measure(window, lambda: count, meter, stop, redis)
    await asyncio.gather(*workers)
    await redis.delete(*keys)
    return Rate("raw XADD", tasks, rate, cpu)


async def part2(gw: Gateway, redis: Any, window: Window) -> str:
    payload = ('{"event_id":"event_AbCdEfGh_123456","type":"session.heartbeat_ack",'
               '"server_event_seq":123456}')
    raw1 = await raw_xadd_rate(gw, redis, 1, payload, window)
    rows: list[list[str]] = []
    errors = 0
    nan = float("nan")
    for n in SESSION_COUNTS:
        raw = raw1 if n == 1 else await raw_xadd_rate(gw, redis, n, payload, window)
        for r in [*[await gateway_rate(gw, redis, cmd, n, window) for cmd in LOADS], raw]:
            errors += r.errors
            rows.append([
                str(n), r.load if r.load == "raw XADD" else f"gateway: {r.load}",
                f"{r.per_s:,.0f}", f"{r.per_s / n:,.0f}",
                "-" if math.isnan(r.scripts_per_event) else f"{r.scripts_per_event:.2f}",
                f"{r.cpu.get('gateway', nan):.0f} / {r.cpu.get('valkey', nan):.0f}"
                f" / {r.cpu['client']:.0f}",
                f"{r.per_s / raw1.per_s:.2f}", f"{r.per_s / raw.per_s:.2f}",
            ])
    out = [
        "Part 2: events journaled per second, one gateway process",
        f"  criterion: answers received by the client per second over a {window.seconds:g} s "
        f"window after {window.warmup_s:g} s warm-up; N sessions, each keeping up to {WINDOW}",
        "  commands unanswered. Each answer is one event stamped, journaled (append_events "
        "EVALSHA) and sent. session.heartbeat also forces a",
        "  lease renewal (a second EVALSHA, see 'EVALSHA/ev'); input_audio_buffer.clear is "
        "the bare one-event path.",
        "  baseline 'raw XADD': one awaited XADD per event (MAXLEN ~20000, "
        f"{len(payload)}-byte payload) from one redis-py asyncio client in this process,",
        "  N tasks on it (one stream each); 'vs raw 1' compares with a single task, "
        "'vs raw N' with N tasks. CPU% = CPU time / window, 100 = one core.",
        "",
        table(["N", "load", "events/s", "per session", "EVALSHA/ev",
               "CPU% gw/valkey/client", "vs raw 1", "vs raw N"], rows, left=2),
    ]
    if errors:
        out.append(f"  WARNING: {errors} answers were not the expected event (errors?)")
    return "\n".join(out)


# -- main -------------------------------------------------------------------------


async def run(gw: Gateway, resumes: int, window: Window) -> list[str]:
    from duplex.store.client import connect as redis_connect

    redis = redis_connect(f"unix://{gw.valkey_socket}")
    try:
        await redis.ping()
        probe = await _connect(gw.url)
        ext = probe.response.headers.get("Sec-WebSocket-Extensions", "none")
        await _recv(probe)
        await probe.close()
        sections = [f"websocket extensions negotiated: {ext}", ""]
        t = time.perf_counter()
        sections.append(await part1(gw, redis, resumes))
        sections.append(f"  (part 1 took {time.perf_counter() - t:.1f} s)")
        sections.append("")
        t = time.perf_counter()
        sections.append(await part2(gw, redis, window))
        sections.append(f"  (part 2 took {time.perf_counter() - t:.1f} s)")
        sections.append("")
        other = Gateway(gw.data_dir, redis_url=f"unix://{gw.valkey_socket}",
                        log_name="gateway-b.log")
        await asyncio.to_thread(other.start)
        try:
            t = time.perf_counter()
            sections.append(await part3(gw, other, resumes))
            sections.append(f"  (part 3 took {time.perf_counter() - t:.1f} s)")
        finally:
            await asyncio.to_thread(other.stop)
        return sections
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a reduced run (smoke test, under 30 s)")
    parser.add_argument("--resumes", type=int, default=None,
                        help="resumes per journal size (default 40; --quick 10)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="throughput window per row (default 4; --quick 1)")
    args = parser.parse_args(argv)
    resumes = args.resumes or (10 if args.quick else 40)
    window = Window(warmup_s=0.25 if args.quick else 0.5,
                    seconds=args.seconds or (1.0 if args.quick else 4.0))
    started = time.perf_counter()
    print(f"bench/resume.py{' --quick' if args.quick else ''}  "
          f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}")
    print(f"machine: {machine()}")
    print(f"load average before: {load_average()} (above ~0.2 other work shares the cores; "
          "figures then read low/noisy)")
    data_dir = Path(tempfile.mkdtemp(prefix="resume-bench-"))
    gw = Gateway(data_dir)
    try:
        gw.start()
        print(f"gateway: {' '.join(Path(a).name if a == sys.executable else a for a in gw.cmd)}")
        print(f"         pid {gw.pid}, valkey pid {gw.valkey_pid()}, {gw.url}; everything on "
              "127.0.0.1, client in this one process")
        print()
        try:
            sections = asyncio.run(run(gw, resumes, window))
        except Exception:
            print("gateway log tail:\n" + gw.log_tail(), file=sys.stderr)
            raise
        print("\n".join(sections))
        complaints = gw.complaints()
        print(f"\ngateway log: {len(complaints)} WARNING/ERROR lines during the run"
              + (":" if complaints else ""))
        for line in complaints[:10]:
            print("  " + line[:160])
    finally:
        gw.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"\nload average after: {load_average()}; total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
