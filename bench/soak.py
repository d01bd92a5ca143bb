"""Soak: normal, hostile and careless clients against one gateway, for a bounded time.

    .venv/bin/python bench/soak.py [--minutes 30] [--quick] [--normal 4] [--hostile 2]
                                   [--careless 4] [--sample-s 30] [--seed 1]
                                   [--retained-max-store-bytes BYTES]

It starts its own tone gateway (``tests/gateway_process.py``: 127.0.0.1, port 0,
an embedded Valkey in a temporary --data-dir) and runs three kinds of client
next to each other until the time is up:

- **normal** callers speak turns in real time (a tone, then silence, through
  server VAD), read every event, and check that each reply completes and that
  its words count up (none lost, repeated or reordered). During about a third
  of the replies the socket is dropped without a close frame at a random moment
  and the session resumed from the last ``server_event_seq`` received. After
  ``--turns-per-call`` turns a caller sends ``session.close`` and checks that
  the session's events, across all its sockets, were exactly seq 1..N (N the
  terminal's), then calls again.
- **hostile** sockets send a steady stream of ``tests/hostile.py`` frames, each
  of which must get one ``error``.
- **careless** clients do what careless clients do, picked at random: vanish
  mid-reply (TCP abort, never resume), open many short sessions, stuff the
  conversation until ``conversation_full``, flood the store (the largest
  instructions allowed, twice, then a stuffed conversation, and a close with
  1000: issue 27), stop reading while a reply streams, send ``session.close``
  or hang up mid-reply, talk over the reply, resume a session they already
  closed.

Every ``--sample-s`` it prints the gateway's RSS, Valkey's ``used_memory`` and
key count, open sessions and server events/s and errors/s (from ``/metrics``).
At the end: memory at warm-up (``--warmup`` of the run, default the first 20 %)
and at the end, with the least-squares slope per minute after warm-up, Valkey's
keys by pattern at both points, and the figures of each kind of client.

Figures, not a verdict, except for four counts that must be 0: events lost and
events duplicated in the normal sessions, crashes (the gateway exiting, a
socket closed with 1011, or one dropped without a close frame that we did not
drop ourselves), and ended sessions resumed (a careless client got back a
session it had closed: issue 27). The exit status is 1 when any of them is not.

The gateway runs with ``--ended-session-retention-s`` = ``--retention-s`` (60 s;
the product's default is 300 s): ended sessions' keys are bounded by time, and
a shorter retention lets them reach their steady state early in the run.
``--retained-max-store-bytes`` passes the gateway's flag of that name: a
budget the ended sessions reach within the run shows Valkey's memory held by
it (docs/store.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests"), str(REPO / "tests" / "e2e")]

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from client import (  # noqa: E402
    RATE,
    TERMINALS,
    RealtimeClient,
    b64,
    eventually,
    resume,
    silence,
    tone,
    valkey,
)
from disconnects import assert_counts_up, spoken_words  # noqa: E402
from fuzz import CRASH_CODES, Tally, _replies, rss_mib  # noqa: E402
from gateway_process import GatewayProcess  # noqa: E402
from hostile import Hostile  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

FRAME_MS = 20
TURN_TIMEOUT_S = 30.0
REPLY_WORDS = 8  # ~2.4 s of reply audio per normal turn
DROP_CHANCE = 0.35  # of a normal reply having its socket dropped
HOSTILE_FRAMES_PER_SESSION = 1000
# the largest session.instructions allowed (duplex.limits.INSTRUCTIONS; the soak
# runs outside the package, as a script, and says the number itself)
INSTRUCTIONS_BYTES = 128 * 1024
# under a content part's limit (duplex.limits.TEXT, 128 KiB); 18 of them pass
# --max-conversation-bytes (2 MiB)
BIG_ITEM_CHARS = 120 * 1024
ABNORMAL = 1006
GRACE_S = 30.0  # the gateway's --disconnect-grace-s (its default)
READY_TIMEOUT_S = 300.0  # the gateway started, to ready


def speech_frames(tone_s: float, silence_s: float) -> list[str]:
    """One spoken turn as ``input_audio_buffer.append`` messages, 20 ms each, encoded
    once: every turn says the same thing, and the client must not eat the CPU."""
    pcm = np.concatenate([tone(tone_s), silence(silence_s)])
    step = RATE * FRAME_MS // 1000
    return [json.dumps({"type": "input_audio_buffer.append", "audio": b64(pcm[i:i + step])})
            for i in range(0, len(pcm), step)]


SPEECH = speech_frames(0.5, 0.6)
VAD = {"audio": {"input": {"turn_detection": {"type": "server_vad",
                                              "silence_duration_ms": 200}}}}


async def say(c: RealtimeClient) -> None:
    """Speak one turn, paced in real time on an absolute schedule."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for i, frame in enumerate(SPEECH):
        await asyncio.sleep(max(0.0, t0 + i * FRAME_MS / 1000 - loop.time()))
        await c.ws.send(frame)


async def next_event(c: RealtimeClient) -> dict[str, Any]:
    """The next event, not kept (a long run must not hold them all)."""
    event: dict[str, Any] = json.loads(await asyncio.wait_for(c.ws.recv(), TURN_TIMEOUT_S))
    return event


def close_code(exc: ConnectionClosed) -> int:
    return exc.rcvd.code if exc.rcvd is not None else ABNORMAL


async def hang_up(c: RealtimeClient) -> int:
    """Close with 1000; the code the server's close frame carried. Reads on while
    closing: websockets stops reading the socket once 16 messages wait unread, and
    the server's close frame would wait behind them (1006, 10 s later)."""
    drain = asyncio.create_task(_discard(c))
    await c.close()
    drain.cancel()
    return c.ws.close_code or ABNORMAL


async def _discard(c: RealtimeClient) -> None:
    try:
        async for _ in c.ws:
            pass
    except ConnectionClosed:
        pass


class SoakFailure(Exception):
    """Something a client was promised did not happen (figures, not a crash)."""


# -- what the clients saw ----------------------------------------------------------

@dataclass
class Figures:
    calls: int = 0
    turns: int = 0
    turns_failed: Counter[str] = field(default_factory=Counter)
    resumes: int = 0
    events: int = 0  # normal sessions' events, all sockets
    lost: int = 0
    duplicated: int = 0
    after_terminal: int = 0
    normal_errors: Counter[str] = field(default_factory=Counter)
    hostile: Tally = field(default_factory=Tally)
    hostile_sessions: int = 0
    careless: Counter[str] = field(default_factory=Counter)
    careless_errors: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # "kind: code"
    closes: Counter[str] = field(default_factory=Counter)  # "kind code"
    crashes: list[str] = field(default_factory=list)
    # careless clients' resumes of a session they had ended (1000 or session.close)
    # that the gateway let through: must be 0 (issue 27)
    resumed_ended: int = 0

    def closed(self, kind: str, code: int, *, ours: bool = False) -> None:
        """A socket of ``kind`` ended with ``code``; ``ours`` when we dropped it."""
        self.closes[f"{kind} {code}{' (ours)' if ours else ''}"] += 1
        if code in CRASH_CODES and not (code == ABNORMAL and ours):
            self.crashes.append(f"{kind} socket closed with {code}")


# -- normal callers ----------------------------------------------------------------

class Call:
    """One normal caller's session. Its sockets come and go; every
    ``server_event_seq`` that reaches any of them is counted."""

    def __init__(self, url: str, rng: random.Random, figures: Figures) -> None:
        self.url, self.rng, self.figures = url, rng, figures
        self.seqs: list[int] = []
        self.client: RealtimeClient | None = None
        self.sid = self.token = ""
        self.dropping = False  # our own abort is under way: resume, do not report

    async def open(self) -> bool:
        """Connect; False when the gateway refused the session (counted)."""
        c = await RealtimeClient.connect(self.url)
        created = await self._read(c)
        if created["type"] != "session.created":
            self.figures.refused[f"normal: {created.get('error', {}).get('code')}"] += 1
            await c.close()
            return False
        self.client, self.sid, self.token = c, created["session"]["id"], created["resume_token"]
        await c.send("session.update", session={"instructions": f"words={REPLY_WORDS}", **VAD})
        while (await self.event())["type"] != "session.updated":
            pass
        return True

    async def _read(self, c: RealtimeClient) -> dict[str, Any]:
        event = await next_event(c)
        if "server_event_seq" in event:
            self.seqs.append(event["server_event_seq"])
        self.figures.events += 1
        if event["type"] == "error":
            self.figures.normal_errors[event["error"]["code"]] += 1
        return event

    async def event(self) -> dict[str, Any]:
        """The session's next event, on whichever socket: our own drops are resumed."""
        while True:
            assert self.client is not None
            try:
                return await self._read(self.client)
            except ConnectionClosed:
                if not self.dropping:
                    raise  # counted by normal_caller
            await self._resume()

    def _drop(self) -> None:
        assert self.client is not None
        self.dropping = True
        self.client.ws.transport.abort()  # no close frame: the session detaches

    async def _resume(self) -> None:
        self.figures.closed("normal", ABNORMAL, ours=True)
        cursor = max(self.seqs, default=0)
        c = await resume(self.url, self.sid, self.token, cursor)
        resumed = await next_event(c)
        if resumed["type"] != "session.resumed":
            raise SoakFailure(f"resume refused: {resumed}")
        self.client, self.token, self.dropping = c, resumed["resume_token"], False
        self.figures.resumes += 1

    async def turn(self) -> None:
        """Speak, then read until this turn's reply is done, maybe dropping the
        socket somewhere in it; the reply must complete and count up."""
        assert self.client is not None
        await say(self.client)
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        kept: list[dict[str, Any]] = []  # this turn's transcript deltas
        response_id = None
        try:
            while True:
                event = await self.event()
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                    # armed only now: every frame of the speech has reached the server
                    if self.rng.random() < DROP_CHANCE:
                        timer = loop.call_later(self.rng.uniform(0, 2.4), self._drop)
                elif event["type"] == "response.output_audio_transcript.delta":
                    kept.append(event)
                elif event["type"] == "response.done" and event["response"]["id"] == response_id:
                    break
        finally:
            if timer is not None:
                timer.cancel()
        if self.dropping:  # the drop came as the reply ended, with nothing left to read
            await self._resume()
        self._check_reply(event, kept)

    def _check_reply(self, done: dict[str, Any], kept: list[dict[str, Any]]) -> None:
        status = done["response"]["status"]
        if status != "completed":
            self.figures.turns_failed[f"status {status}"] += 1
            return
        try:
            assert_counts_up(spoken_words(kept, done["response"]["id"]))
        except AssertionError as exc:
            self.figures.turns_failed[f"words: {str(exc)[:60]}"] += 1
            return
        self.figures.turns += 1

    async def hang_up(self) -> None:
        """``session.close``; then every seq 1..N (N the terminal's) exactly once."""
        assert self.client is not None
        await self.client.send("session.close")
        while (terminal := await self.event())["type"] not in TERMINALS:
            pass
        self.figures.closed("normal", await hang_up(self.client))
        last = terminal["server_event_seq"]
        got = set(self.seqs)
        self.figures.lost += len(set(range(1, last + 1)) - got)
        self.figures.duplicated += len(self.seqs) - len(got)
        self.figures.after_terminal += sum(seq > last for seq in self.seqs)
        self.figures.calls += 1


async def normal_caller(url: str, rng: random.Random, turns: int, figures: Figures,
                        stop: asyncio.Event) -> None:
    """Call after call until ``stop``; a call ends after ``turns`` turns or at stop."""
    while not stop.is_set():
        call = Call(url, rng, figures)
        if not await call.open():
            await asyncio.sleep(1)  # refused: retry later, as 1013 asks
            continue
        try:
            for _ in range(turns):
                if stop.is_set():
                    break
                try:
                    await call.turn()
                except TimeoutError:
                    figures.turns_failed["timeout"] += 1
            await call.hang_up()
        except ConnectionClosed as exc:
            figures.closed("normal", close_code(exc))
            figures.turns_failed[f"call broke: socket closed with {close_code(exc)}"] += 1
        except (SoakFailure, TimeoutError) as exc:
            figures.turns_failed[f"call broke: {type(exc).__name__}: {str(exc)[:60]}"] += 1


# -- hostile sockets ---------------------------------------------------------------

async def hostile_sender(url: str, seed: int, rate: float, window: int, figures: Figures,
                         stop: asyncio.Event) -> None:
    """``rate`` hostile frames a second, at most ``window`` unanswered; a new session
    every ``HOSTILE_FRAMES_PER_SESSION`` frames."""
    source = Hostile(seed)
    tally = figures.hostile
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        c = await RealtimeClient.connect(url)
        created = await next_event(c)
        if created["type"] != "session.created":
            figures.refused[f"hostile: {created.get('error', {}).get('code')}"] += 1
            await c.close()
            await asyncio.sleep(1)
            continue
        figures.hostile_sessions += 1
        room = asyncio.Semaphore(window)
        closes_before = sum(tally.closes.values())
        reader = asyncio.create_task(_replies(c, room, tally))
        t0 = loop.time()
        for i in range(HOSTILE_FRAMES_PER_SESSION):
            if stop.is_set() or reader.done():
                break
            await asyncio.sleep(max(0.0, t0 + i / rate - loop.time()))
            await room.acquire()
            await c.ws.send(source.message())
            tally.sent += 1
        await _drained(room, window, reader)
        reader.cancel()
        code = await hang_up(c)
        if sum(tally.closes.values()) == closes_before:  # else _replies saw it end
            figures.closed("hostile", code)


def hostile_ends(figures: Figures) -> None:
    """The hostile sockets the server ended, as ``_replies`` counted them."""
    for code, n in figures.hostile.closes.items():
        figures.closes[f"hostile {code}"] += n
        if code in CRASH_CODES:
            figures.crashes.extend([f"hostile socket closed with {code}"] * n)


async def _drained(room: asyncio.Semaphore, window: int, reader: asyncio.Task[None]) -> None:
    """Every frame sent has its answer (or the socket ended)."""
    for _ in range(window):
        acquired = asyncio.create_task(room.acquire())
        await asyncio.wait([acquired, reader], timeout=TURN_TIMEOUT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        if not acquired.done():
            acquired.cancel()
            return


# -- careless clients --------------------------------------------------------------

class Careless:
    """One careless client: a random misbehaviour at a time, until ``stop``."""

    def __init__(self, url: str, rng: random.Random, figures: Figures) -> None:
        self.url, self.rng, self.figures = url, rng, figures
        self.closed_sessions: list[tuple[str, str]] = []  # (sid, token), for stale resumes

    async def run(self, stop: asyncio.Event) -> None:
        acts = list(self.ACTS)
        weights = [w for _, w in acts]
        while not stop.is_set():
            act = self.rng.choices([a for a, _ in acts], weights)[0]
            try:
                await act(self)
                self.figures.careless[act.__name__] += 1
            except Refused:
                pass
            except ConnectionClosed as exc:
                self.figures.closed("careless", close_code(exc))
                self.figures.careless[f"{act.__name__} (socket ended)"] += 1
            except (TimeoutError, SoakFailure) as exc:
                self.figures.careless[f"{act.__name__} failed: {type(exc).__name__} {exc}"] += 1
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))  # the user's own dawdling

    async def _open(self, **session: Any) -> tuple[RealtimeClient, dict[str, Any]]:
        c = await RealtimeClient.connect(self.url)
        created = await next_event(c)
        if created["type"] != "session.created":
            self.figures.refused[f"careless: {created.get('error', {}).get('code')}"] += 1
            await c.close()
            raise Refused
        if session:
            await c.send("session.update", session=session)
            await self._until(c, "session.updated")
        return c, created

    async def _until(self, c: RealtimeClient, type_: str) -> dict[str, Any]:
        while (event := await next_event(c))["type"] != type_:
            if event["type"] == "error":
                self.figures.careless_errors[event["error"]["code"]] += 1
        return event

    async def _reply_streaming(self, words: int) -> tuple[RealtimeClient, dict[str, Any]]:
        """A session whose reply of ``words`` words has begun to stream."""
        c, created = await self._open(instructions=f"words={words}", **VAD)
        await say(c)
        await self._until(c, "response.output_audio.delta")
        return c, created

    def _abort(self, c: RealtimeClient) -> None:
        c.ws.transport.abort()
        self.figures.closed("careless", ABNORMAL, ours=True)

    async def _hang_up(self, c: RealtimeClient, created: dict[str, Any]) -> None:
        self.figures.closed("careless", await hang_up(c))
        self._remember(created)

    def _remember(self, created: dict[str, Any]) -> None:
        self.closed_sessions = [*self.closed_sessions[-9:],
                                (created["session"]["id"], created["resume_token"])]

    async def vanish_mid_reply(self) -> None:
        """The train enters a tunnel and the phone is never seen again."""
        c, _ = await self._reply_streaming(40)
        self._abort(c)

    async def vanish_idle(self) -> None:
        """Opens a session, never says a word, and is gone."""
        c, _ = await self._open()
        self._abort(c)

    async def short_sessions(self) -> None:
        """A page reloaded again and again: sessions opened and closed at once, half of
        them before ``session.created`` was even read."""
        for _ in range(self.rng.randint(3, 8)):
            c = await RealtimeClient.connect(self.url)
            if self.rng.random() < 0.5:
                created = await next_event(c)
                if created["type"] != "session.created":
                    self.figures.refused[f"careless: {created['error']['code']}"] += 1
            self.figures.closed("careless", await hang_up(c))

    async def stuff_conversation(self) -> None:
        """Pastes huge texts into the conversation until it is full."""
        c, created = await self._open()
        await self.stuff_conversation_of(c)
        await self._hang_up(c, created)

    async def stuff_conversation_of(self, c: RealtimeClient) -> None:
        for n in range(64):
            text = f"paste {n} " + "x" * BIG_ITEM_CHARS
            await c.send("conversation.item.create", item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]})
            event = await next_event(c)
            while event["type"] not in ("conversation.item.added", "error"):
                event = await next_event(c)
            if event["type"] == "error":
                self.figures.careless_errors[event["error"]["code"]] += 1
                if event["error"]["code"] not in ("conversation_full", "session_store_full"):
                    raise SoakFailure(event["error"]["code"])
                break
        else:
            raise SoakFailure("the conversation never filled")

    async def fill_store(self) -> None:
        """Sends the largest instructions allowed, twice, stuffs the conversation, and
        closes with 1000: issue 27's flood, bounded now by the session's share of
        the store and the budget of ended sessions (docs/store.md)."""
        biggest = "i" * INSTRUCTIONS_BYTES
        c, created = await self._open(instructions=biggest)
        await c.send("session.update", session={"instructions": biggest[:-1]})
        await self._until(c, "session.updated")
        await self.stuff_conversation_of(c)
        await self._hang_up(c, created)

    async def stop_reading(self) -> None:
        """Stops reading while a long reply streams, then hangs up or vanishes."""
        c, created = await self._reply_streaming(100)
        await asyncio.sleep(self.rng.uniform(3, 10))  # not reading: that is the point
        if self.rng.random() < 0.5:
            self._abort(c)
        else:
            await self._hang_up(c, created)

    async def close_mid_reply(self) -> None:
        """``session.close`` while the reply streams: the terminal must still come."""
        c, created = await self._reply_streaming(40)
        await c.send("session.close", reason="changed my mind")
        await self._until(c, "session.closed")
        await self._hang_up(c, created)

    async def hang_up_mid_reply(self) -> None:
        """Closes the socket (code 1000) mid-reply, without ``session.close``."""
        c, created = await self._reply_streaming(40)
        await self._hang_up(c, created)

    async def talk_over(self) -> None:
        """Talks over the reply (barge-in), hears the new reply out, hangs up."""
        c, created = await self._reply_streaming(40)
        await say(c)
        done = await self._until(c, "response.done")
        if done["response"]["status"] != "cancelled":
            raise SoakFailure(f"barge-in left the reply {done['response']['status']}")
        await self._until(c, "response.done")
        await self._hang_up(c, created)

    async def stale_resume(self) -> None:
        """Comes back to a session it closed a while ago: refused, with 1008."""
        if not self.closed_sessions:
            return
        sid, token = self.rng.choice(self.closed_sessions)
        c = await resume(self.url, sid, token, 0)
        event = await next_event(c)
        if event["type"] == "session.resumed":
            self.figures.resumed_ended += 1
            self.figures.closed("careless", await hang_up(c))
            return
        if event["type"] != "error":
            raise SoakFailure(f"a closed session answered a resume with {event['type']}")
        self.figures.careless_errors[event["error"]["code"]] += 1
        try:
            await next_event(c)
        except ConnectionClosed as exc:
            self.figures.closed("careless", close_code(exc))

    ACTS: ClassVar[list[tuple[Callable[[Careless], Awaitable[None]], float]]] = [
        (vanish_mid_reply, 2), (vanish_idle, 1), (short_sessions, 2),
        (stuff_conversation, 1), (stop_reading, 1), (close_mid_reply, 1),
        (hang_up_mid_reply, 1), (talk_over, 1), (stale_resume, 1), (fill_store, 1)]


class Refused(Exception):
    """The gateway refused a session (counted where it happened)."""


# -- what the gateway holds ------------------------------------------------------

@dataclass
class Sample:
    t: float
    rss: float  # MiB
    redis: float  # MiB
    keys: int
    sessions: int
    events: float  # counters since start, for rates
    errors: float
    cpu: float  # the gateway's CPU seconds so far
    heap: float  # MiB traced by tracemalloc (nan without --tracemalloc)


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (the gateway's python process, not its Valkey)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


METRICS = ("duplex_sessions_active", "duplex_server_events_total", "duplex_errors_total")


async def scrape(http: httpx.AsyncClient, base: str) -> dict[str, float]:
    """Sums over labels of the ``/metrics`` samples named in ``METRICS``."""
    sums = dict.fromkeys(METRICS, 0.0)
    for line in (await http.get(f"{base}/metrics")).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


async def sample(gw: GatewayProcess, r: Any, http: httpx.AsyncClient, t0: float,
                 heap: Heap | None) -> Sample:
    assert gw.proc is not None
    info = await r.info("memory")
    m = await scrape(http, gw.http)
    return Sample(time.monotonic() - t0, rss_mib(gw.proc.pid), info["used_memory"] / 2**20,
                  await r.dbsize(), int(m["duplex_sessions_active"]),
                  m["duplex_server_events_total"], m["duplex_errors_total"], cpu_s(gw.proc.pid),
                  heap.mib() if heap else float("nan"))


HEADER = (f"{'elapsed':>8} {'RSS MiB':>8} {'heap MiB':>8} {'valkey MiB':>10} {'keys':>6} "
          f"{'sessions':>8} {'events/s':>9} {'errors/s':>9} {'CPU%':>5} {'turns':>6} "
          f"{'resumes':>7} {'careless':>8}")


def row(s: Sample, prev: Sample, figures: Figures) -> str:
    dt = max(s.t - prev.t, 1e-9)
    heap = "-" if np.isnan(s.heap) else f"{s.heap:.1f}"
    return (f"{clock(s.t):>8} {s.rss:>8.1f} {heap:>8} {s.redis:>10.2f} {s.keys:>6} "
            f"{s.sessions:>8} "
            f"{(s.events - prev.events) / dt:>9.1f} {(s.errors - prev.errors) / dt:>9.1f} "
            f"{100 * (s.cpu - prev.cpu) / dt:>5.0f} "
            f"{figures.turns:>6} {figures.resumes:>7} {sum(figures.careless.values()):>8}")


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


# a session's keys carry its bucket's hash tag and its id; the owner's set, the
# process id (docs/store.md): one pattern each, whatever the ids
KEY_PARTS = [(re.compile(r"\{b\d+\}"), "{bucket}"), (re.compile(r"sess_[\w-]+"), "{sid}"),
             (re.compile(r"(?<=:owner:).+(?=:sessions$)"), "{owner}")]


def key_pattern(key: str) -> str:
    for part, name in KEY_PARTS:
        key = part.sub(name, key)
    return key


async def census(r: Any) -> tuple[dict[str, tuple[int, int]], Counter[str]]:
    """Valkey's keys by pattern (``key_pattern``): (count, bytes) each, and
    the sessions by state."""
    keys = [k async for k in r.scan_iter(count=1000)]
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k)
    sizes = await pipe.execute()
    found: dict[str, tuple[int, int]] = {}
    for k, size in zip(keys, sizes, strict=True):
        n, total = found.get(key_pattern(k), (0, 0))
        found[key_pattern(k)] = (n + 1, total + (size or 0))
    pipe = r.pipeline(transaction=False)
    metas = [k for k in keys if k.endswith(":meta")]
    for k in metas:
        pipe.hget(k, "state")
    states = Counter(str(s) for s in await pipe.execute())
    return found, states


# `--tracemalloc`, for diagnosis: the gateway's Python heap, through a sitecustomize
# module put on its PYTHONPATH (product code untouched). PYTHONTRACEMALLOC starts
# tracing before the first import; this reports the traced size each second and
# dumps a snapshot on SIGUSR1.
SITECUSTOMIZE = """\
import os, signal, threading, time, tracemalloc
OUT = os.environ["SOAK_HEAP_DIR"]
def _report():
    while True:
        with open(os.path.join(OUT, "heap.tmp"), "w") as f:
            f.write("%d %d" % tracemalloc.get_traced_memory())
        os.replace(os.path.join(OUT, "heap.tmp"), os.path.join(OUT, "heap"))
        time.sleep(1)
def _snapshot(signum, frame):
    n = len([x for x in os.listdir(OUT) if x.startswith("snap")])
    tracemalloc.take_snapshot().dump(os.path.join(OUT, "part"))
    os.replace(os.path.join(OUT, "part"), os.path.join(OUT, "snap%d" % n))
if tracemalloc.is_tracing():
    threading.Thread(target=_report, daemon=True).start()
    signal.signal(signal.SIGUSR1, _snapshot)
"""


class Heap:
    """The traced Python heap of a gateway started with ``env()``."""

    def __init__(self, folder: Path, frames: int) -> None:
        self.folder, self.frames, self.pid = folder, frames, 0
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(filter(None, [str(self.folder), os.environ.get("PYTHONPATH")]))
        return {"PYTHONPATH": path, "SOAK_HEAP_DIR": str(self.folder),
                "PYTHONTRACEMALLOC": str(self.frames)}

    def mib(self) -> float:
        try:
            return int((self.folder / "heap").read_text().split()[0]) / 2**20
        except (OSError, IndexError, ValueError):
            return float("nan")

    async def snapshot(self) -> Path:
        path = self.folder / f"snap{len(list(self.folder.glob('snap*')))}"
        os.kill(self.pid, signal.SIGUSR1)
        await eventually(lambda: _exists(path), 120, f"the gateway's heap snapshot {path}")
        return path


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


def print_heap_growth(first: Path, last: Path, top: int = 15) -> None:
    """The allocation sites that grew most between two snapshots."""
    a, b = tracemalloc.Snapshot.load(str(first)), tracemalloc.Snapshot.load(str(last))
    print(f"\ngateway Python heap growth, warm-up -> end (top {top} by size, tracemalloc):")
    for stat in b.compare_to(a, "traceback" if a.traceback_limit > 1 else "lineno")[:top]:
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback)
        print(f"  {stat.size_diff / 1024:>+9.1f} KiB {stat.count_diff:>+7} blocks  {where[:150]}")


# -- the run -----------------------------------------------------------------------

@dataclass
class Watched:
    samples: list[Sample] = field(default_factory=list)
    censuses: list[Any] = field(default_factory=list)  # at warm-up and at the end
    snapshots: list[Path] = field(default_factory=list)  # the same, with --tracemalloc


async def watch(gw: GatewayProcess, data_dir: Path, figures: Figures, seconds: float,
                every: float, warmup_s: float, start: Callable[[], object],
                heap: Heap | None) -> Watched:
    """A first sample, then ``start()`` the clients and sample every ``every`` s for
    ``seconds``; Valkey's census (and the heap) at warm-up and at the end. Ends early
    if the gateway exits."""
    assert gw.proc is not None
    r = valkey(data_dir)
    w = Watched()

    async def checkpoint() -> None:
        w.censuses.append(await census(r))
        if heap is not None and gw.proc is not None and gw.proc.poll() is None:
            w.snapshots.append(await heap.snapshot())

    async with httpx.AsyncClient(timeout=10) as http:
        t0 = time.monotonic()
        w.samples.append(await sample(gw, r, http, t0, heap))
        start()
        print(HEADER)
        print(row(w.samples[0], w.samples[0], figures), flush=True)
        while w.samples[-1].t < seconds and gw.proc.poll() is None:
            await asyncio.sleep(min(every, seconds - w.samples[-1].t) + 0.01)
            w.samples.append(await sample(gw, r, http, t0, heap))
            print(row(w.samples[-1], w.samples[-2], figures), flush=True)
            if not w.censuses and w.samples[-1].t >= warmup_s:
                await checkpoint()
        await checkpoint()
    await r.aclose()
    return w


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="dg-soak-") as tmp:
        heap = Heap(Path(tmp) / "heap", args.tracemalloc) if args.tracemalloc else None
        gw = GatewayProcess(Path(tmp), env=heap.env() if heap else None, args=[
            "--host", "127.0.0.1", "--plugin", "tone", "--output-lead-ms", "300",
            "--log-level", "warning", "--max-sessions", str(args.max_sessions),
            "--disconnect-grace-s", str(GRACE_S),
            "--ended-session-retention-s", str(args.retention_s),
            *(["--retained-max-store-bytes", str(args.retained_max_store_bytes)]
              if args.retained_max_store_bytes is not None else [])])
        # traced (--tracemalloc) on a busy box, readiness took over the default 60 s
        gw.start(timeout_s=READY_TIMEOUT_S)
        if heap is not None and gw.proc is not None:
            heap.pid = gw.proc.pid
        try:
            return await soak(gw, Path(tmp), args, heap)
        finally:
            gw.stop()


async def soak(gw: GatewayProcess, data_dir: Path, args: argparse.Namespace,
               heap: Heap | None) -> int:
    assert gw.proc is not None
    print(f"soak {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs: "
          f"{args.minutes:g} min, {args.normal} normal, {args.hostile} hostile "
          f"({args.hostile_rate:g} frames/s each), {args.careless} careless; gateway {gw.ws} "
          f"(pid {gw.proc.pid}), --max-sessions {args.max_sessions}, "
          f"--ended-session-retention-s {args.retention_s:g}", flush=True)
    figures, stop = Figures(), asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    seconds = args.minutes * 60
    # ended and vanished sessions stay in Valkey for the grace, then the retention:
    # before that, memory is still filling up to its steady state
    warmup_s = (seconds * args.warmup if args.warmup is not None
                else max(0.2 * seconds, GRACE_S + args.retention_s))
    watched = await watch(
        gw, data_dir, figures, seconds, args.sample_s, warmup_s,
        lambda: tasks.extend(asyncio.create_task(c) for c in clients(gw.ws, args, figures, stop)),
        heap)
    stop.set()
    await finish(tasks, figures)
    if gw.proc.poll() is not None:
        figures.crashes.append(f"the gateway exited with {gw.proc.returncode}")
    report(figures, watched, warmup_s, gw.output)
    return 1 if (figures.lost or figures.duplicated or figures.crashes
                 or figures.resumed_ended) else 0


def clients(url: str, args: argparse.Namespace, figures: Figures,
            stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
    rng = random.Random(args.seed)
    out = [normal_caller(url, random.Random(rng.random()), args.turns_per_call, figures, stop)
           for _ in range(args.normal)]
    out += [hostile_sender(url, args.seed + i, args.hostile_rate, 8, figures, stop)
            for i in range(args.hostile)]
    out += [Careless(url, random.Random(rng.random()), figures).run(stop)
            for _ in range(args.careless)]
    return out


async def finish(tasks: list[asyncio.Task[None]], figures: Figures) -> None:
    """Each client ends what it is doing (a normal call hangs up and is checked)."""
    done, late = await asyncio.wait(tasks, timeout=2 * TURN_TIMEOUT_S)
    for task in late:
        task.cancel()
        figures.crashes.append("a client did not finish within 60 s of the stop")
    for task in done:
        if task.exception() is not None:
            figures.crashes.append(f"a client failed: {task.exception()!r}")
    hostile_ends(figures)


# -- the report --------------------------------------------------------------------

def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(seconds, value)`` points, per minute."""
    if len(points) < 2:
        return float("nan")
    ts, vs = np.array([p[0] for p in points]) / 60, np.array([p[1] for p in points])
    return float(np.polyfit(ts, vs, 1)[0])


def report(figures: Figures, watched: Watched, warmup_s: float, log: list[str]) -> None:
    samples, censuses = watched.samples, watched.censuses
    after = [s for s in samples if s.t >= warmup_s] or samples[-1:]
    warm, end = after[0], samples[-1]
    print(f"\nmemory (warm-up = first sample at or after {clock(warmup_s)}):")
    for name, get, unit in (("gateway RSS", lambda s: s.rss, "MiB"),
                            ("gateway Python heap", lambda s: s.heap, "MiB"),
                            ("valkey used_memory", lambda s: s.redis, "MiB"),
                            ("valkey keys", lambda s: float(s.keys), "")):
        if np.isnan(get(end)):
            continue  # no --tracemalloc
        print(f"  {name:20} {get(warm):>9.2f} {unit:3} at {clock(warm.t)}, "
              f"{get(end):>9.2f} {unit:3} at {clock(end.t)}; "
              f"slope after warm-up {slope([(s.t, get(s)) for s in after]):+.3f} {unit}/min")
    if censuses:
        print_census(censuses)
    if len(watched.snapshots) == 2:
        print_heap_growth(watched.snapshots[0], watched.snapshots[1])
    print_clients(figures)
    print(f"\n{figures.lost} lost, {figures.duplicated} duplicated "
          f"(normal sessions: {figures.calls} calls, {figures.events:,} events)")
    print(f"{len(figures.crashes)} crashes" + "".join(f"\n  {c}" for c in figures.crashes))
    print(f"{figures.resumed_ended} resumed a session its client had ended "
          "(careless stale resumes let through)")
    print(f"gateway log: {len(log)} lines, {sum('WARNING' in x for x in log)} warnings, "
          f"{sum('Traceback' in x for x in log)} tracebacks")
    for line in [x for x in log if "WARNING" in x or "ERROR" in x][:10]:
        print("  " + line.rstrip()[:200])


def print_census(censuses: list[Any]) -> None:
    first, last = censuses[0], censuses[-1]
    print("\nvalkey keys by pattern (count, KiB):  at warm-up -> at the end")
    for pattern in sorted(set(first[0]) | set(last[0])):
        (n0, b0), (n1, b1) = first[0].get(pattern, (0, 0)), last[0].get(pattern, (0, 0))
        print(f"  {pattern:36} {n0:>6} {b0 / 1024:>9.1f}  -> {n1:>6} {b1 / 1024:>9.1f}")
    print(f"  sessions by state: {dict(first[1])} -> {dict(last[1])}")


def print_clients(f: Figures) -> None:
    print(f"\nnormal:   {f.calls} calls closed, {f.turns} turns completed, failed "
          f"{sum(f.turns_failed.values())} {dict(f.turns_failed)}, {f.resumes} resumes, "
          f"errors {dict(f.normal_errors)}, events after the terminal {f.after_terminal}")
    h = f.hostile
    print(f"hostile:  {f.hostile_sessions} sessions, {h.sent:,} frames, "
          f"{sum(h.codes.values()):,} errors ({len(h.codes)} codes), "
          f"{h.sent - sum(h.codes.values())} unanswered, "
          f"non-error replies {dict(h.unexpected)}")
    print("careless: " + ", ".join(f"{k} {n}" for k, n in sorted(f.careless.items())))
    print(f"          errors {dict(f.careless_errors)}")
    print(f"refused:  {dict(f.refused)}")
    print("closes:   " + ", ".join(f"{k}: {n}" for k, n in sorted(f.closes.items())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--quick", action="store_true", help="3 minutes, a sample every 10 s")
    p.add_argument("--normal", type=int, default=4)
    p.add_argument("--hostile", type=int, default=2)
    p.add_argument("--careless", type=int, default=4)
    p.add_argument("--hostile-rate", type=float, default=20.0, help="frames/s per socket")
    p.add_argument("--turns-per-call", type=int, default=30)
    p.add_argument("--sample-s", type=float, default=None, help="default 30 (10 --quick)")
    p.add_argument("--warmup", type=float, default=None,
                   help="fraction of the run; default the first 20 %% or, if longer, "
                   "--disconnect-grace-s + --retention-s (90 s)")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--retention-s", type=float, default=60.0,
                   help="the gateway's --ended-session-retention-s")
    p.add_argument("--retained-max-store-bytes", type=int, default=None,
                   help="the gateway's --retained-max-store-bytes (unset: its default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                   help="diagnosis: trace the gateway's Python heap (FRAMES deep) and "
                   "print what grew after warm-up; slows the gateway")
    args = p.parse_args(argv)
    if args.quick:
        args.minutes = 3.0
        args.turns_per_call = min(args.turns_per_call, 10)
    if args.sample_s is None:
        args.sample_s = 10.0 if args.quick else 30.0
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
