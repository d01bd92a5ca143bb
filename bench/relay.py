"""Relay benchmark: N concurrent real-time voice sessions against the gateway and
against a bare ``websockets`` echo server (the floor), side by side.

    .venv/bin/python bench/relay.py [--sessions 1,2,4,8,16,32] [--seconds 10]
                                    [--gateway-url ws://HOST:PORT/v1/realtime]
                                    [--echo-url ws://HOST:PORT/] [--quick]
                                    [--client-procs 1] [--targets gateway,echo]
                                    [--workers 1] [--binary] [--echo-arg=--stack=uvicorn]
                                    [--gateway-session JSON] [--profile FILE]
                                    [--repeat K] [--together] [--deflate]

Each session is one asyncio task streaming 20 ms frames of 24 kHz PCM16 mono as
``input_audio_buffer.append`` JSON (``--binary``: binary PCM16 messages to the
gateway), paced on an absolute ``loop.time()``
schedule (frame i is due at t0 + i * 20 ms; no drift), in a loop of ~1.5 s of a
440 Hz tone then ~1.5 s of silence, so the gateway's server VAD commits a turn
every 3 s and the tone plugin answers with audio while the next tone streams
in (full duplex; the next tone barges in on the reply). Sessions are spread
over the frame period and over the 3 s cycle (a few silent frames first), as
independent callers would be.

It prints figures, not a verdict on the product; see bench/README.md for what
each column means. It starts (and stops) its own gateway (``gateway.cli serve
--port 0 --plugin tone`` on an embedded Valkey in a temporary --data-dir) and
its own echo server (bench/echo_server.py), both on 127.0.0.1, unless given
URLs. Client load runs in ``--client-procs`` worker processes (this file with
``--worker``), sessions split evenly between them. The default is ONE client
process: up to N=96 it used at most ~25% of a core on the 2-core machine the
figures in bench/README.md come from, so it is not what limits the gateway; at
N=128 against the echo server a single client process starts to lag its own
schedule (send-lag p99 16-43 ms) and ``--client-procs 2`` is needed there.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed

from duplex.store.embedded import stop_child

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway_metrics
import proctree
from relay_report import FRAME_MS, LEGEND, Run, fmt, print_memory, print_summary, print_table

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable

RATE = 24000
FRAME_S = FRAME_MS / 1000
FRAME_SAMPLES = RATE * FRAME_MS // 1000  # 480
TONE_FRAMES = 75  # 1.5 s
SILENCE_FRAMES = 75  # 1.5 s
CYCLE = TONE_FRAMES + SILENCE_FRAMES

GATEWAY_READY = re.compile(r"duplex-gateway ready: http://([^/\s]+)/")
ECHO_READY = re.compile(r"echo-server ready: (ws://\S+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# =============================================================================
# client worker (one process; N sessions, one asyncio task each)
# =============================================================================


def _frames() -> tuple[list[str], str]:
    """The base64 audio of the tone frames (phase-continuous) and of a silent frame."""
    tone: list[str] = []
    n = 0
    for _ in range(TONE_FRAMES):
        samples = [int(0.3 * 32767 * math.sin(2 * math.pi * 440.0 * (n + k) / RATE))
                   for k in range(FRAME_SAMPLES)]
        n += FRAME_SAMPLES
        tone.append(base64.b64encode(struct.pack(f"<{FRAME_SAMPLES}h", *samples)).decode())
    silence = base64.b64encode(bytes(2 * FRAME_SAMPLES)).decode()
    return tone, silence


def _message(i: int, audio: str) -> str:
    # compact JSON, built by concatenation (cheap); event_id carries the frame index
    return '{"type":"input_audio_buffer.append","event_id":"f' + str(i) + '","audio":"' \
        + audio + '"}'


@dataclass
class SessionStats:
    lead_in: int  # silent frames before the first tone
    lag_ms: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)  # loop time before send(), per frame
    rtt_ms: list[float] = field(default_factory=list)
    stop_ms: list[float] = field(default_factory=list)  # trigger frame -> speech_stopped
    answer_at: list[int] = field(default_factory=list)  # frame index of each rtt / stop
    commit_ms: list[float] = field(default_factory=list)  # trigger frame -> committed
    first_audio_ms: list[float] = field(default_factory=list)  # committed -> first delta
    turn_ms: list[float] = field(default_factory=list)  # trigger frame -> first delta
    turns_expected: int = 0
    events: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    msgs_in: int = 0
    bytes_in: int = 0
    silence_ms: int = 500


async def _read(ws: Any, target: str, st: SessionStats, loop: asyncio.AbstractEventLoop) -> None:
    with contextlib.suppress(ConnectionClosed):
        await _read_events(ws, target, st, loop)


async def _read_events(ws: Any, target: str, st: SessionStats,
                       loop: asyncio.AbstractEventLoop) -> None:
    trigger: int | None = None  # the frame that completed the latest turn's silence
    committed_at: float | None = None  # the latest commit still awaiting its first audio
    responded: set[str] = set()
    async for raw in ws:
        now = loop.time()
        st.msgs_in += 1
        st.bytes_in += len(raw)
        obj = json.loads(raw)
        kind = obj.get("type", "?")
        st.events[kind] = st.events.get(kind, 0) + 1
        if target == "echo":
            if kind == "input_audio_buffer.echoed":
                i = int(obj["event_id"][1:])
                st.rtt_ms.append(1000 * (now - st.sent_at[i]))
                st.answer_at.append(i)
            continue
        if kind == "input_audio_buffer.speech_stopped":
            # the VAD can stop a turn once it has silence_duration_ms of quiet after
            # the last voiced frame: the frame ending there is the trigger
            trigger = (int(obj["audio_end_ms"]) + st.silence_ms) // FRAME_MS - 1
            if 0 <= trigger < len(st.sent_at):
                st.stop_ms.append(1000 * (now - st.sent_at[trigger]))
                st.answer_at.append(trigger)
            else:
                trigger = None
        elif kind == "input_audio_buffer.committed":
            if trigger is not None:
                st.commit_ms.append(1000 * (now - st.sent_at[trigger]))
            committed_at = now
        elif kind == "response.output_audio.delta":
            rid = obj.get("response_id", "")
            if rid not in responded:
                responded.add(rid)
                if committed_at is not None:
                    st.first_audio_ms.append(1000 * (now - committed_at))
                    if trigger is not None:
                        st.turn_ms.append(1000 * (now - st.sent_at[trigger]))
                committed_at, trigger = None, None
        elif kind == "error":
            code = (obj.get("error") or {}).get("code", "?")
            st.errors[code] = st.errors.get(code, 0) + 1


async def _stream(ws: Any, st: SessionStats, t0: float, total: int, tone: list[str],
                  silence: str, loop: asyncio.AbstractEventLoop, binary: bool) -> None:
    raw = {audio: base64.b64decode(audio) for audio in [*tone, silence]} if binary else {}
    for i in range(total):
        due = t0 + i * FRAME_S
        now = loop.time()
        if due > now:
            await asyncio.sleep(due - now)
        k = i - st.lead_in
        audio = tone[k % CYCLE] if k >= 0 and k % CYCLE < TONE_FRAMES else silence
        st.sent_at.append(loop.time())
        try:
            # --binary: the gateway's extension, the frame's PCM16 as a binary message
            await ws.send(raw[audio] if binary else _message(i, audio))
        except ConnectionClosed as exc:  # the server ended the session: count it, stop
            code = f"connection_closed_{exc.rcvd.code if exc.rcvd else 'abnormally'}"
            st.errors[code] = st.errors.get(code, 0) + 1
            return
        st.lag_ms.append(1000 * (loop.time() - due))


async def worker_main(args: argparse.Namespace) -> None:
    from websockets.asyncio.client import connect

    loop = asyncio.get_running_loop()
    tone, silence = _frames()
    n, total = args.n, round(args.seconds * 1000 / FRAME_MS)
    # spread sessions over the cycle: session k starts with lead_in silent frames
    span = args.n_total
    stats = [SessionStats(lead_in=((args.first + k) * SILENCE_FRAMES) // span) for k in range(n)]

    async def open_one(st: SessionStats) -> Any:
        ws = await connect(args.url, max_size=None, ping_interval=None,
                           compression="deflate" if args.deflate else None,
                           open_timeout=30)
        if args.target == "gateway":
            created = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if created.get("type") != "session.created":
                raise RuntimeError(f"expected session.created, got {created}")
            td = (created.get("session") or {}).get("audio", {}).get("input", {}) \
                .get("turn_detection") or created.get("session", {}).get("turn_detection") or {}
            st.silence_ms = int(td.get("silence_duration_ms", 500))
            if args.gateway_session:
                await ws.send(json.dumps({"type": "session.update",
                                          "session": json.loads(args.gateway_session)}))
                while (reply := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] \
                        != "session.updated":
                    if reply["type"] == "error":
                        raise RuntimeError(f"--gateway-session refused: {reply['error']}")
        return ws

    opened = await asyncio.gather(*(open_one(st) for st in stats), return_exceptions=True)
    failed = [x for x in opened if isinstance(x, BaseException)]
    if failed:
        reasons = sorted({str(x).splitlines()[0][:100] or type(x).__name__ for x in failed})
        print(f"FAILED {len(failed)}/{n} sessions did not open: " + " | ".join(reasons[:3]),
              flush=True)
        await asyncio.gather(*(ws.close() for ws in opened if not isinstance(ws, BaseException)),
                             return_exceptions=True)
        return
    conns: list[Any] = list(opened)
    for st in stats:
        # a turn is expected when its trigger frame (the tone's end + the VAD's
        # silence window, as session.created states it) is inside the run
        quiet = st.silence_ms // FRAME_MS
        st.turns_expected = sum(1 for c in range(total // CYCLE + 2)
                                if st.lead_in + c * CYCLE + TONE_FRAMES + quiet <= total)
    print("READY", flush=True)
    line = await loop.run_in_executor(None, sys.stdin.readline)
    wall_t0 = float(line.split()[1])
    t0 = loop.time() + (wall_t0 - time.time())
    readers = [asyncio.create_task(_read(ws, args.target, st, loop))
               for ws, st in zip(conns, stats, strict=True)]
    cpu0 = time.process_time()
    # frame phase spread: session k is offset by k/N of a frame period
    senders = [asyncio.create_task(_stream(ws, st, t0 + FRAME_S * (args.first + k) / span,
                                           total, tone, silence, loop,
                                           args.binary and args.target == "gateway"))
               for k, (ws, st) in enumerate(zip(conns, stats, strict=True))]
    await asyncio.gather(*senders)
    end = loop.time()
    cpu1 = time.process_time()
    print("STREAMED", flush=True)
    await asyncio.sleep(args.drain)  # the last round trips / events
    for r in readers:
        r.cancel()
    await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
    result = {
        "stream_s": end - t0, "client_cpu_s": cpu1 - cpu0,
        "sessions": [{k: v for k, v in vars(st).items() if not k.startswith("_")
                      and k != "sent_at"} for st in stats],
    }
    print("RESULT " + json.dumps(result), flush=True)


# =============================================================================
# processes: gateway, echo server, CPU accounting
# =============================================================================


def cpu_ticks(pid: int) -> int | None:
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)


def server_ticks(pids: tuple[int, int | None]) -> int | None:
    """CPU ticks of the server's python processes: the gateway and, with
    ``--workers``, its workers (the embedded Valkey ``pids[1]`` not included)."""
    if pids[0] <= 0:
        return None
    return proctree.ticks(proctree.server_pids(pids[0], pids[1]))


def server_rss_kb(pids: tuple[int, int | None], field: str = "VmRSS") -> int | None:
    """Resident memory of the server's python processes (``VmHWM``: their peaks)."""
    if pids[0] <= 0:
        return None
    return proctree.memory_kb(proctree.server_pids(pids[0], pids[1]), field)


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine_busy_ticks() -> int:
    """CPU ticks all processes on this machine spent busy (first line of /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM if this bench dies (Linux), so nothing leaks."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_together(argvs: list[list[str]], cwd: Path | str,
                   procs: list[subprocess.Popen[str]]) -> None:
    """Start load processes that print READY once set up (into ``procs``, so the
    caller stops those started even when one fails), then hand them all one
    wall-clock instant to begin at, and return at it: their load overlaps fully."""
    for argv in argvs:
        procs.append(subprocess.Popen(argv, cwd=cwd, text=True, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, preexec_fn=die_with_parent))
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "READY":
            raise SystemExit(f"a load process did not start: {p.args}")
    start_at = time.time() + 0.3
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start_at}\n")
        p.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))


def store_counters(sock: Path | None) -> dict[str, int] | None:
    """Valkey's own counters (INFO stats), or None without a socket to ask: reply
    writes (about one per round trip: a pipeline is one), commands executed (those
    its scripts ran included), bytes received and sent."""
    if sock is None:
        return None
    import redis

    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=5)
    try:
        info = client.info("stats")
    except redis.RedisError:
        return None
    finally:
        client.close()
    return {"rt": int(info["total_writes_processed"]),
            "cmds": int(info["total_commands_processed"]),
            "bytes": int(info["total_net_input_bytes"]) + int(info["total_net_output_bytes"])}


def idle_cpu(pids: tuple[int, int | None], seconds: float = 1.0) -> tuple[float, float]:
    """% of a core the server (and its valkey child) burn with no session open."""
    a0, b0 = server_ticks(pids), cpu_ticks(pids[1] or 0)
    m0 = time.monotonic()
    time.sleep(seconds)
    a1, b1 = server_ticks(pids), cpu_ticks(pids[1] or 0)
    dt = time.monotonic() - m0
    nan = float("nan")
    return (100 * (a1 - a0) / CLK_TCK / dt if a0 is not None and a1 is not None else nan,
            100 * (b1 - b0) / CLK_TCK / dt if b0 is not None and b1 is not None else nan)


class Server:
    """A child process that prints a ready line with its address."""

    def __init__(self, name: str, cmd: list[str], ready: re.Pattern[str],
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.ready = ready
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.match = ""
        self.output: list[str] = []

    def start(self, timeout_s: float = 60.0) -> Server:
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1, preexec_fn=die_with_parent)
        seen = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = self.ready.search(line)
                if m and not self.match:
                    self.match = m.group(1)
                    seen.set()
            seen.set()

        threading.Thread(target=pump, daemon=True).start()
        if not seen.wait(timeout_s) or not self.match:
            self.stop()
            raise RuntimeError(f"{self.name} did not start:\n" + "".join(self.output[-30:]))
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)


def start_gateway(data_dir: Path, extra: list[str], profile: str | None,
                  nodelay: bool = False) -> Server:
    env = {k: v for k, v in os.environ.items()
           if k != "REDIS_URL" and not k.startswith("DUPLEX_GATEWAY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if profile or nodelay:
        script = data_dir.parent / "launch_gateway.py"
        script.write_text(LAUNCH_WRAPPER.format(
            out=str(Path(profile).resolve()) if profile else None, nodelay=nodelay))
        launch = [PY, str(script)]
    else:
        launch = [PY, "-m", "gateway.cli"]
    cmd = [*launch, "serve", "--host", "127.0.0.1", "--port", "0",
           "--plugin", "tone", "--data-dir", str(data_dir), "--max-sessions", "1000",
           "--log-level", "warning", *extra]
    return Server("gateway", cmd, GATEWAY_READY, env).start()


def start_echo(uvloop: bool, extra: list[str]) -> Server:
    cmd = [PY, str(REPO / "bench" / "echo_server.py"), "--host", "127.0.0.1", "--port", "0",
           *extra]
    if uvloop:
        cmd.append("--uvloop")
    return Server("echo server", cmd, ECHO_READY).start()


class StartLine:
    """One wall-clock instant for runs started together (``--together``): each run's
    client processes get it once every run's are ready, so the windows are the same
    however long one side took to set up on a busy box."""

    def __init__(self, parties: int) -> None:
        self.at = 0.0
        self._barrier = threading.Barrier(parties, action=self._set)

    def _set(self) -> None:
        self.at = time.time() + 0.25

    def wait(self) -> float:
        self._barrier.wait(timeout=300)
        return self.at

    def abort(self) -> None:
        self._barrier.abort()


def run_one(target: str, url: str, server_pids: tuple[int, int | None], n: int, seconds: float,
            procs: int, uvloop: bool, store_sock: Path | None = None,
            binary: bool = False, gateway_session: str | None = None,
            deflate: bool = False, metrics_at: list[str] | None = None,
            go: StartLine | None = None) -> Run:
    run = Run(target, n, min(procs, n), seconds)
    split = [n // run.procs + (1 if i < n % run.procs else 0) for i in range(run.procs)]
    workers: list[subprocess.Popen[str]] = []
    first = 0
    try:
        for count in split:
            cmd = [PY, str(Path(__file__).resolve()), "--worker", "--target", target, "--url",
                   url, "--n", str(count), "--first", str(first), "--n-total", str(n),
                   "--seconds", str(seconds)]
            if uvloop:
                cmd.append("--uvloop")
            if binary:
                cmd.append("--binary")
            if deflate:
                cmd.append("--deflate")
            if gateway_session and target == "gateway":
                cmd += ["--gateway-session", gateway_session]
            first += count
            workers.append(subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, bufsize=1,
                                            preexec_fn=die_with_parent))
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(line.strip() or f"client worker exited {w.wait(30)}")
        gc0 = gateway_metrics.long_pauses(metrics_at) if metrics_at else None
        wall_t0 = go.wait() if go else time.time() + 0.25
        for w in workers:
            assert w.stdin is not None
            w.stdin.write(f"GO {wall_t0}\n")
            w.stdin.flush()
        time.sleep(max(0.0, wall_t0 - time.time()))
        srv0, sto0, m0 = server_ticks(server_pids), (
            cpu_ticks(server_pids[1]) if server_pids[1] else None), time.monotonic()
        box0 = machine_busy_ticks()
        io0 = store_counters(store_sock)
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if line.strip() != "STREAMED":
                raise RuntimeError(f"{target} N={n}: a client worker died mid-run")
        srv1, sto1, m1 = server_ticks(server_pids), (
            cpu_ticks(server_pids[1]) if server_pids[1] else None), time.monotonic()
        box1 = machine_busy_ticks()
        io1 = store_counters(store_sock)
        gc1 = gateway_metrics.long_pauses(metrics_at) if metrics_at else None
        results = []
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if not line.startswith("RESULT "):
                raise RuntimeError(f"{target} N={n}: a client worker gave no result")
            results.append(json.loads(line[7:]))
            w.wait(30)
    except Exception as exc:
        if go:
            go.abort()  # the runs started with this one must not wait for it
        run.failure = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        return run
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(5)
    run.wall_s = m1 - m0
    run.started_at = wall_t0
    if io0 is not None and io1 is not None:
        run.store_io = {k: io1[k] - io0[k] for k in io0}
    if gc0 is not None and gc1 is not None:
        run.gc_long = gc1 - gc0
    run.machine_cpu_s = (box1 - box0) / CLK_TCK
    if server_pids[0] and (srv0 is None or srv1 is None):
        run.failure = "server process gone"
        return run
    run.server_cpu_s = (srv1 - srv0) / CLK_TCK if srv0 is not None and srv1 is not None \
        else float("nan")  # a server given by URL and no pid
    if sto0 is not None and sto1 is not None:
        run.store_cpu_s = (sto1 - sto0) / CLK_TCK
    tail = int(1000 / FRAME_MS)
    for res in results:
        run.client_cpu_s += res["client_cpu_s"]
        for s in res["sessions"]:
            run.frames += len(s["lag_ms"])
            run.lag += s["lag_ms"]
            run.lag_tail += s["lag_ms"][-tail:]
            run.rtt += s["rtt_ms"]
            run.stop += s["stop_ms"]
            lat = s["stop_ms"] if target == "gateway" else s["rtt_ms"]
            run.answers += list(zip(s["answer_at"], lat, strict=True))
            run.commit += s["commit_ms"]
            run.first_audio += s["first_audio_ms"]
            run.turn += s["turn_ms"]
            run.turns_expected += s["turns_expected"]
            run.msgs_in += s["msgs_in"]
            run.audio_deltas += s["events"].get("response.output_audio.delta", 0)
            for k, v in s["errors"].items():
                run.errors[k] = run.errors.get(k, 0) + v
    return run


# =============================================================================
# main
# =============================================================================


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", default="1,2,4,8,16,32",
                   help="comma-separated session counts N (default 1,2,4,8,16,32)")
    p.add_argument("--seconds", type=float, default=10.0, help="streaming time per run")
    p.add_argument("--gateway-url", help="use this gateway instead of starting one "
                   "(its server CPU is then measured only if --gateway-pid is given)")
    p.add_argument("--gateway-pid", type=int, help="pid of the --gateway-url process")
    p.add_argument("--echo-url", help="use this echo server instead of starting one")
    p.add_argument("--targets", default="gateway,echo", help="gateway,echo or one of them")
    p.add_argument("--workers", type=int, default=1,
                   help="start the gateway with `serve --workers N` (N processes on one "
                   "port); CPU and RSS are summed over them")
    p.add_argument("--client-procs", type=int, default=1,
                   help="client worker processes (sessions split between them)")
    p.add_argument("--uvloop", action="store_true",
                   help="run the client workers (and the echo server) on uvloop")
    p.add_argument("--quick", action="store_true", help="smoke run: N=1,4 for 4 s")
    p.add_argument("--binary", action="store_true",
                   help="send the gateway each frame as a binary message of raw PCM16 (the "
                   "gateway's extension) instead of input_audio_buffer.append JSON; the "
                   "echo server still gets JSON")
    p.add_argument("--deflate", action="store_true",
                   help="the clients offer permessage-deflate, as websockets-based clients "
                   "(the openai SDK's) do by default, and the echo server accepts it as the "
                   "gateway does unless --gateway-arg=--ws-compression=none; every message "
                   "is then compressed each way")
    p.add_argument("--gateway-session", metavar="JSON",
                   help="diagnosis: a session object the gateway's clients send as a "
                   "session.update once created, e.g. '{\"turn_detection\": null}' (the "
                   "input path alone) or '{\"turn_detection\": {\"type\": \"server_vad\", "
                   "\"create_response\": false}}' (turns, no replies); turns then go "
                   "unanswered, so the run does not count as held")
    p.add_argument("--gateway-arg", action="append", default=[],
                   help="extra argument for `gateway.cli serve` (repeatable)")
    p.add_argument("--echo-arg", action="append", default=[],
                   help="extra argument for bench/echo_server.py (repeatable), e.g. "
                   "--echo-arg=--stack=uvicorn")
    p.add_argument("--profile", metavar="FILE",
                   help="run the gateway under cProfile and write its stats to FILE")
    p.add_argument("--gateway-tcp-nodelay", action="store_true",
                   help="diagnosis: start the gateway with TCP_NODELAY on its listening "
                   "socket (set from a bench-side launcher, product code untouched)")
    p.add_argument("--repeat", type=int, default=1, metavar="K",
                   help="run every target at every N K times, in K rounds (each round "
                   "runs both targets), and print the gateway/echo ratio's median and "
                   "range over rounds 2..K (round 1 warms both processes up): one run's "
                   "ratio moves with the machine (+-15%% here)")
    p.add_argument("--together", action="store_true",
                   help="run the targets at the same time, each with its own client "
                   "processes: both meet the same machine in the same seconds, so their "
                   "ratio does not move with a neighbour that comes and goes between runs "
                   "(the other target shows in `other CPU%%`)")
    p.add_argument("--json", metavar="FILE", help="also write the raw figures to FILE")
    # worker mode (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--target", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--n-total", type=int, help=argparse.SUPPRESS)
    p.add_argument("--drain", type=float, default=0.3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if args.quick:
        args.sessions, args.seconds = "1,4", 4.0
    return args


# `gateway.cli serve` launched from a bench-side script, for diagnosis only (no
# product code changes): under cProfile (stats written when it exits), and/or
# with TCP_NODELAY set on the listening socket (Linux copies it to every
# accepted connection).
LAUNCH_WRAPPER = """\
import cProfile, signal, socket, sys, time
import gateway.cli as cli
# uvicorn re-raises the SIGTERM it caught once it has shut down; exit cleanly then
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if {nodelay!r}:
    listen = cli.listen
    def _listen(host, port):
        sock = listen(host, port)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    cli.listen = _listen
out = {out!r}
# CPU time, not wall time: on a shared box a call that is descheduled (a write
# that wakes Valkey on the same core) would otherwise be charged for the wait
prof = cProfile.Profile(time.process_time) if out else None
if prof:
    prof.enable()
try:
    cli.main(sys.argv[1:])
finally:
    if prof:
        prof.disable()
        prof.dump_stats(out)
"""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        if args.uvloop:
            import uvloop
            uvloop.run(worker_main(args))
        else:
            asyncio.run(worker_main(args))
        return 0

    sizes = [int(x) for x in args.sessions.split(",") if x.strip()]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    started = time.monotonic()
    servers: list[Server] = []
    tmp = Path(tempfile.mkdtemp(prefix="relaybench-"))
    runs: list[Run] = []
    metrics_at: list[str] | None = None  # of a gateway the bench started
    try:
        plan: list[tuple[str, str, tuple[int, int | None]]] = []
        if "gateway" in targets:
            if args.gateway_url:
                pid = args.gateway_pid
                store = proctree.store_child(pid) if pid else None
                plan.append(("gateway", args.gateway_url, (pid or 0, store)))
            else:
                extra = [*(["--workers", str(args.workers)] if args.workers > 1 else []),
                         *args.gateway_arg]
                gw = start_gateway(tmp / "gw", extra, args.profile,
                                   args.gateway_tcp_nodelay)
                servers.append(gw)
                url = f"ws://{gw.match}/v1/realtime"
                plan.append(("gateway", url, (gw.pid, proctree.store_child(gw.pid))))
                metrics_at = gateway_metrics.addresses(gw.output, gw.match)
        if "echo" in targets:
            if args.echo_url:
                plan.append(("echo", args.echo_url, (0, None)))
            else:
                echo = start_echo(args.uvloop, [*(["--compression", "deflate"] if args.deflate
                                                  else []), *args.echo_arg])
                servers.append(echo)
                plan.append(("echo", echo.match, (echo.pid, None)))
        if args.gateway_tcp_nodelay or args.profile:
            print("  (gateway launched via the bench launcher:"
                  + (" TCP_NODELAY on its listening socket" if args.gateway_tcp_nodelay else "")
                  + (f" cProfile -> {args.profile}" if args.profile else "") + ")")
        print(f"relay bench {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average "
              f"{loadavg()}: N={sizes}, {args.seconds:g} s per run"
              + (f", {args.repeat} rounds" if args.repeat > 1 else "")
              + ", 20 ms frames of 24 kHz "
              f"PCM16, {TONE_FRAMES * FRAME_MS / 1000:g} s tone / "
              f"{SILENCE_FRAMES * FRAME_MS / 1000:g} s silence; {os.cpu_count()} CPUs; "
              f"client: {args.client_procs} worker process(es), "
              f"{'uvloop' if args.uvloop else 'asyncio'} loop"
              + ("; binary PCM16 frames to the gateway" if args.binary else "")
              + ("; permessage-deflate offered" if args.deflate else ""), flush=True)
        idle_kb = {target: server_rss_kb(pids) for target, url, pids in plan}
        for target, url, pids in plan:
            own, store = idle_cpu(pids)
            print(f"  {target}: {url} (pid {pids[0] or '?'}"
                  + (f", valkey-server pid {pids[1]}" if pids[1] else "")
                  + f"); idle CPU with no session: {fmt(own, 1)}% of a core"
                  + (f" (+ valkey {fmt(store, 1)}%)" if pids[1] else ""), flush=True)
        for k, group in _schedule(plan, sizes, args.repeat, args.together):
            t = time.monotonic()
            got = _run_group(group, tmp, args, metrics_at)
            for (target, _url, pids, n), r in zip(group, got, strict=True):
                r.rss = (idle_kb[target], server_rss_kb(pids, "VmHWM"))
                r.round = k
                runs.append(r)
                held, why = r.held()
                shown = f"{target} N={n}" + (f" (round {k + 1})" if args.repeat > 1 else "")
                print(f"  ran {shown} in {time.monotonic() - t:.1f} s: "
                      f"{'held' if held else 'NOT held: ' + why}", flush=True)
            time.sleep(0.5)  # let closing sessions settle
    finally:
        for s in reversed(servers):
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print_table(runs)
    print()
    print_summary(runs)
    print_memory(runs)
    print(LEGEND)
    print(f"total bench time {time.monotonic() - started:.0f} s; load average now {loadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps([{**vars(r), "held": r.held()} for r in runs]))
    return 0


Job = tuple[str, str, tuple[int, int | None], int]  # target, url, server pids, N


def _schedule(plan: list[tuple[str, str, tuple[int, int | None]]], sizes: list[int],
              rounds: int, together: bool) -> list[tuple[int, list[Job]]]:
    """The runs, in order, as (round, runs started at the same time): one at a time,
    each target through every N in turn; with ``together``, every target at once."""
    if together:
        return [(k, [(*entry, n) for entry in plan]) for k in range(rounds) for n in sizes]
    return [(k, [(*entry, n)]) for k in range(rounds) for entry in plan for n in sizes]


def _run_group(group: list[Job], tmp: Path, args: argparse.Namespace,
               metrics_at: list[str] | None) -> list[Run]:
    """Run ``group`` at the same time (each target its own client processes, measured
    over its own streaming window, which overlap), a thread each."""
    go = StartLine(len(group)) if len(group) > 1 else None

    def one(job: Job) -> Run:
        target, url, pids, n = job
        # where gateway.cli puts its embedded Valkey: EmbeddedValkey(data dir / "valkey")
        sock = tmp / "gw" / "valkey" / "valkey.sock" if target == "gateway" \
            and not args.gateway_url else None
        return run_one(target, url, pids, n, args.seconds, args.client_procs, args.uvloop,
                       sock, args.binary, args.gateway_session, args.deflate,
                       metrics_at if target == "gateway" else None, go)
    if len(group) == 1:
        return [one(group[0])]
    with concurrent.futures.ThreadPoolExecutor(len(group)) as pool:
        return list(pool.map(one, group))


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through the clean-up in main()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
