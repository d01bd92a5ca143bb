"""``bench/relay.py``'s results: one ``Run`` per (target, N, round), and the
report printed from them (the table, the limits found, the gateway/echo ratios,
memory per session, the legend)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

FRAME_MS = 20

# "held real time" criterion (printed with the table)
LAG_P99_MAX_MS = 20.0  # frames leave the client on schedule
LAG_TAIL_MAX_MS = 20.0  # ... still on schedule in the last second (no growing backlog)
SERVER_P99_MAX_MS = 100.0  # the server answers within 5 frames
SERVER_GROWTH_MAX_MS = 20.0  # ... and not later and later (a queue building up)



def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class Run:
    target: str
    n: int
    procs: int
    seconds: float
    wall_s: float = 0.0
    started_at: float = 0.0  # wall clock time the streaming began
    frames: int = 0
    lag: list[float] = field(default_factory=list)
    lag_tail: list[float] = field(default_factory=list)
    rtt: list[float] = field(default_factory=list)
    stop: list[float] = field(default_factory=list)
    commit: list[float] = field(default_factory=list)
    first_audio: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    answers: list[tuple[int, float]] = field(default_factory=list)  # (frame, server ms)
    turns_expected: int = 0
    msgs_in: int = 0
    audio_deltas: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    server_cpu_s: float = 0.0
    store_cpu_s: float | None = None
    store_io: dict[str, int] | None = None  # Valkey counters over the run (store_counters)
    gc_long: int | None = None  # the gateway's collector pauses >= 25 ms over the run
    client_cpu_s: float = 0.0
    machine_cpu_s: float = 0.0  # every process on the machine, busy CPU seconds
    failure: str = ""
    rss: tuple[int | None, int | None] = (None, None)  # server KB: idle at start, peak after
    round: int = 0  # of --repeat: every target runs every N once a round

    def other_cpu_s(self) -> float:
        """Busy CPU on the machine that was neither server, valkey nor client."""
        ours = (0.0 if math.isnan(self.server_cpu_s) else self.server_cpu_s) \
            + (self.store_cpu_s or 0.0) + self.client_cpu_s
        return max(0.0, self.machine_cpu_s - ours)

    def growth(self) -> float:
        """Mean server answer latency over the last third of the run minus over the
        first third, ms: > 0 and large means a queue building up on the server."""
        total = round(self.seconds * 1000 / FRAME_MS)
        early = [ms for i, ms in self.answers if i < total / 3]
        late = [ms for i, ms in self.answers if i >= 2 * total / 3]
        if not early or not late:
            return float("nan")
        return sum(late) / len(late) - sum(early) / len(early)

    @property
    def server_latency(self) -> list[float]:
        return self.stop if self.target == "gateway" else self.rtt

    @property
    def session_seconds(self) -> float:
        return self.n * self.wall_s

    def held(self) -> tuple[bool, str]:
        if self.failure:
            return False, self.failure
        why = []
        if pct(self.lag, 0.99) >= LAG_P99_MAX_MS:
            why.append("send lag p99")
        if self.lag_tail and sum(self.lag_tail) / len(self.lag_tail) >= LAG_TAIL_MAX_MS:
            why.append("lag growing")
        lat = self.server_latency
        if not lat or pct(lat, 0.99) >= SERVER_P99_MAX_MS:
            why.append(f"server latency p99 >= {SERVER_P99_MAX_MS:.0f} ms")
        if self.growth() >= SERVER_GROWTH_MAX_MS:
            why.append(f"server latency growing (+{self.growth():.0f} ms)")
        if self.target == "gateway" and len(self.stop) < self.turns_expected:
            why.append(f"turns {len(self.stop)}/{self.turns_expected}")
        if self.target == "echo" and len(self.rtt) < self.frames:
            why.append(f"echoes {len(self.rtt)}/{self.frames}")
        if self.errors:
            why.append("errors " + ",".join(f"{k}x{v}" for k, v in self.errors.items()))
        return not why, "; ".join(why)



# =============================================================================
# report
# =============================================================================


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


HEADER = ("target", "N", "cli", "fr/s in", "msg/s out", "lag p50/p99", "stop p50/p99",
          "commit p50/p99", "c>aud p50/p99", "turn p50/p99", "rtt p50/p99", "grow",
          "srv CPU%",
          "valkey CPU%", "redis rt/cmd/KiB", "gc>=25ms", "ms/sess-s", "cli CPU%", "other CPU%",
          "held")


def pair(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    return f"{fmt(pct(values, 0.5), digits)}/{fmt(pct(values, 0.99), digits)}"


def per_session_minute(r: Run) -> str:
    """Redis round trips, commands and KiB per session-minute: rt/cmd/KiB."""
    if r.store_io is None or not r.session_seconds:
        return "-"
    k = 60 / r.session_seconds
    io = r.store_io
    return f"{io['rt'] * k:.0f}/{io['cmds'] * k:.0f}/{io['bytes'] * k / 1024:.0f}"


def row(r: Run) -> tuple[str, ...]:
    held, why = r.held()
    w = r.wall_s or float("nan")
    store_pct = None if r.store_cpu_s is None else 100 * r.store_cpu_s / w
    label = r.target if not r.round else f"{r.target} r{r.round + 1}"
    return (label, str(r.n), str(r.procs),
            fmt(r.frames / w, 0), fmt(r.msgs_in / w, 0),
            pair(r.lag), pair(r.stop), pair(r.commit), pair(r.first_audio), pair(r.turn),
            pair(r.rtt, 2), fmt(r.growth(), 1),
            fmt(100 * r.server_cpu_s / w, 0), fmt(store_pct, 0), per_session_minute(r),
            "-" if r.gc_long is None else str(r.gc_long),
            fmt(cpu_ms(r), 1), fmt(100 * r.client_cpu_s / w, 0),
            fmt(100 * r.other_cpu_s() / w, 0),
            "yes" if held else f"NO ({why})")


def print_table(runs: list[Run]) -> None:
    rows = [HEADER] + [row(r) for r in runs]
    last = len(HEADER) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(last)]
    for k, r in enumerate(rows):
        print("  ".join([c.rjust(w) for c, w in zip(r, widths, strict=False)] + [r[last]]),
              flush=True)
        if k == 0:
            print("  ".join("-" * w for w in [*widths, len(HEADER[last])]))


def cpu_ms(r: Run) -> float:
    """Server CPU ms per session-second of streamed audio."""
    return 1000 * r.server_cpu_s / r.session_seconds if r.session_seconds else float("nan")


def print_summary(runs: list[Run]) -> None:
    for target in dict.fromkeys(r.target for r in runs):
        by_n: dict[int, list[Run]] = {}
        for r in runs:
            if r.target == target:
                by_n.setdefault(r.n, []).append(r)
        best, miss = 0, None
        for n in sorted(by_n):
            failed = [r for r in by_n[n] if not r.held()[0]]
            if failed:
                miss = failed[0]
                break
            best = n
        tested = ",".join(str(n) for n in sorted(by_n))
        if miss is None:
            shown = f">= {best} (every N tested held; the limit is higher)"
        else:
            shown = f"{best} (first miss at N={miss.n}: {miss.held()[1]})"
        print(f"max N held in real time: {target} = {shown}  [tested N={tested}]")
    ratios = gateway_echo_ratios(runs)
    if ratios:
        parts = []
        for n, got in ratios.items():
            if len(got) == 1:
                parts.append(f"N={n}: {got[0]:.1f}x")
                continue
            # round 1 warms both processes up: here an echo's first run costs it
            # 20-30 % more than its later ones, the gateway's about the same
            warm = got[1:]
            parts.append(f"N={n}: median {statistics.median(warm):.2f}x over rounds "
                         f"2-{len(got)} ({min(warm):.2f}-{max(warm):.2f}); round 1, which "
                         f"warms both up, {got[0]:.2f}x")
        print("gateway / echo server CPU per session-second (python process only): "
              + "; ".join(parts))


def gateway_echo_ratios(runs: list[Run]) -> dict[int, list[float]]:
    """Per N, the gateway's CPU per session-second over the echo's, one ratio per
    round in which both ran at that N (a round's two runs are minutes apart at most,
    so a machine that slows down or speeds up moves both)."""
    cost = {(r.target, r.n, r.round): cpu_ms(r) for r in runs if r.session_seconds}
    ratios: dict[int, list[float]] = {}
    for (target, n, k), g in sorted(cost.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        e = cost.get(("echo", n, k))
        if target == "gateway" and e and e > 0:
            ratios.setdefault(n, []).append(g / e)
    return ratios


def print_memory(runs: list[Run]) -> None:
    """Server memory per session: (peak RSS after the run - RSS idle at the start) / N."""
    parts: dict[str, list[str]] = {}
    for r in runs:
        idle, peak = r.rss
        if idle is None or peak is None or r.failure or r.round:
            continue
        parts.setdefault(r.target, []).append(f"N={r.n}: {(peak - idle) / r.n:.0f}")
    for target, shown in parts.items():
        idle = next(r.rss[0] for r in runs if r.target == target)
        print(f"server RSS per session, KB ({target}: peak VmHWM summed over its python "
              f"processes minus {idle / 1024:.0f} MB idle at the start, / N): "
              + ", ".join(shown))


LEGEND = f"""\
columns (latencies in ms, as p50/p99 over all frames or turns of the run):
  cli        client worker processes the N sessions were split across
  fr/s in    frames sent per second, all sessions (real time is 50 x N)
  msg/s out  server->client messages per second
  lag        how late each frame left the client vs its absolute 20 ms schedule
             (measured after send() returned)
  stop       gateway: sending the frame that completes the VAD's silence window ->
             receiving input_audio_buffer.speech_stopped
  commit     gateway: the same frame -> input_audio_buffer.committed
  c>aud      gateway: input_audio_buffer.committed -> the response's first
             response.output_audio.delta
  turn       gateway: the same frame -> first response.output_audio.delta (what a
             caller waits after the server could know the turn ended)
  rtt        echo: frame round trip (send() -> echoed reply received)
  grow       server answer latency (gateway: stop; echo: rtt), mean over the last
             third of the run minus mean over the first third
  srv CPU%   server python process, % of one core over the streaming window
  valkey CPU% embedded valkey-server child of the gateway, % of one core
  redis rt/cmd/KiB  per session-minute of streamed audio, from the embedded Valkey's
             INFO stats: reply writes (~ round trips; a pipeline is one), commands
             executed (those its scripts ran included), KiB received + sent
  gc>=25ms   gateway: its garbage collector's pauses of 25 ms or more over the run,
             all its processes (from each one's /metrics: duplex_gc_pause_seconds)
  ms/sess-s  server python CPU ms per session-second of streamed audio (valkey not
             included; includes the server's idle cost, shown above the table)
  cli CPU%   the client worker processes, % of one core
  other CPU% everything else busy on the machine meanwhile (other processes, the
             kernel), % of one core: a noisy neighbour shows up here
held real time = send-lag p99 < {LAG_P99_MAX_MS:.0f} ms AND mean send lag over the last 1 s
  < {LAG_TAIL_MAX_MS:.0f} ms (no backlog on the way in) AND server answer latency (gateway:
  stop; echo: rtt) p99 < {SERVER_P99_MAX_MS:.0f} ms AND grow < {SERVER_GROWTH_MAX_MS:.0f} ms
  (no queue building on the server) AND every turn (gateway) / frame (echo) answered
  AND no error events."""


