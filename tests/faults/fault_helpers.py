"""Helpers of the fault tests (and of tests/cluster, which runs the same checks on a
Valkey Cluster): gateway processes made and stopped per test, a WebSocket read without
pause, and what to check on it.

A fault test must keep reading while it breaks things (a client that stops reading
cannot tell silence from loss), so ``Stream`` reads in a background task and keeps
every message with its arrival time and raw text; tests wait on conditions over
those messages with bounded deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import redis.asyncio as aioredis
import websockets
from client import b64, eventually, reply_pcm, silence, tone
from gateway_process import GatewayProcess, stop_all
from websockets.exceptions import ConnectionClosed

from duplex.store import keys
from plugins.tone import decode_turn
from plugins.tone.reply import reply_words

RATE = 24000

GatewayFactory = Callable[..., GatewayProcess]  # the ``gateways`` fixture

BASE_ARGS = ("--plugin", "tone", "--output-lead-ms", "300")
TEARDOWN_STOP_S = 5.0  # a gateway stuck on a paused store is killed rather than waited for


@contextmanager
def gateway_factory() -> Iterator[GatewayFactory]:
    """``make(*flags, data_dir=None)``: a tone-plugin gateway process, not started yet.

    The data dir is short (a unix socket path must fit in 108 bytes) and removed at
    the end. Two gateways in turn on one embedded Valkey share ``data_dir``. Gateways
    still running at the end get SIGTERM, all at once, and SIGKILL after
    ``TEARDOWN_STOP_S``: a clean exit is what saves a gateway's coverage data (a test
    that wants a crash kills its gateway itself). Their log tail is printed, which
    pytest shows for a failed test.
    """
    made: list[GatewayProcess] = []
    dirs: list[Path] = []

    def make(*flags: str, data_dir: Path | None = None) -> GatewayProcess:
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="dg-gw-"))
            dirs.append(data_dir)
        proc = GatewayProcess(data_dir, args=[*BASE_ARGS, *flags])
        made.append(proc)
        return proc

    try:
        yield make
    finally:
        stop_all(made, timeout_s=TEARDOWN_STOP_S)
        for proc in made:
            if proc.output:
                print(f"--- gateway {proc.address or '(not ready)'} log tail ---")
                print("".join(proc.output[-60:]), end="")
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Msg:
    t: float  # loop time of arrival
    raw: str  # the text exactly as it came off the socket
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event["type"])

    @property
    def seq(self) -> int | None:
        return self.event.get("server_event_seq")

    @property
    def code(self) -> str | None:
        return self.event["error"]["code"] if self.type == "error" else None


class Stream:
    """A realtime socket whose messages are read continuously in the background."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.messages: list[Msg] = []
        self.close_code: int | None = None
        self.closed = asyncio.Event()
        self._changed = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, url: str, timeout: float = 5.0) -> Stream:
        ws = await asyncio.wait_for(websockets.connect(url, max_size=None), timeout)
        return cls(ws)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for raw in self.ws:
                text = raw.decode() if isinstance(raw, bytes) else raw
                self.messages.append(Msg(loop.time(), text, json.loads(text)))
                self._changed.set()
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()
            self._changed.set()

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, 5.0)

    # -- sending ---------------------------------------------------------------------

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def append(self, pcm: np.ndarray, frame_ms: int = 20) -> None:
        step = RATE * frame_ms // 1000
        for start in range(0, len(pcm), step):
            await self.send("input_audio_buffer.append", audio=b64(pcm[start:start + step]))

    async def speak(self, seconds: float = 1.0, freq: float = 440.0) -> None:
        """A tone, then enough silence for server VAD to end the turn."""
        await self.append(tone(seconds, freq))
        await self.append(silence(0.8))

    # -- waiting ---------------------------------------------------------------------

    def tail(self, n: int = 8) -> list[str]:
        return [f"{m.type}#{m.seq}" if m.seq else f"{m.type}:{m.code}" if m.code else m.type
                for m in self.messages[-n:]]

    async def wait(self, predicate: Callable[[], bool], what: str,
                   timeout: float = 10.0) -> None:
        """Until ``predicate()`` holds; fails after ``timeout`` s or when the socket closes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {what} within {timeout} s; last: {self.tail()}")
            if self.closed.is_set():
                raise AssertionError(f"socket closed ({self.close_code}) before {what}; "
                                     f"last: {self.tail()}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def find(self, match: Callable[[Msg], bool], start: int = 0) -> int | None:
        for i in range(start, len(self.messages)):
            if match(self.messages[i]):
                return i
        return None

    async def until(self, match: Callable[[Msg], bool], what: str, *, start: int = 0,
                    timeout: float = 10.0) -> int:
        """Index of the first message from ``start`` on that ``match``es."""
        found: list[int] = []

        def hit() -> bool:
            i = self.find(match, start)
            if i is None:
                return False
            found.append(i)
            return True

        await self.wait(hit, what, timeout)
        return found[0]

    async def until_type(self, type_: str, *, start: int = 0, timeout: float = 10.0) -> int:
        return await self.until(lambda m: m.type == type_, type_, start=start, timeout=timeout)

    async def wait_closed(self, timeout: float = 10.0) -> int | None:
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"socket still open after {timeout} s; "
                                 f"last: {self.tail()}") from None
        return self.close_code


# -- what the checks look at --------------------------------------------------------------


def trace(messages: list[Msg]) -> str:
    """The messages in short: type, seq or error code, and the word of a transcript delta."""
    out = []
    for m in messages:
        label = m.type.removeprefix("response.").removeprefix("output_audio")
        if m.seq is not None:
            label += f"#{m.seq}"
        if m.code:
            label += f":{m.code}"
        if m.type == "response.output_audio_transcript.delta":
            label += f"={m.event['delta'].strip()}"
        out.append(label)
    return " ".join(out)


def seqs(messages: list[Msg]) -> list[int]:
    return [m.seq for m in messages if m.seq is not None]


def store_errors(messages: list[Msg]) -> list[Msg]:
    return [m for m in messages if m.code == "store_unavailable"]


def assert_ordered_exactly_once(messages: list[Msg]) -> None:
    """Seqs strictly increase with no duplicate, and (I4) none is skipped: a seq the
    journal holds but the client never got would be silence without explanation."""
    got = seqs(messages)
    assert got, "no seq'd event at all"
    dups = sorted({s for s in got if got.count(s) > 1})
    assert not dups, f"duplicate seqs: {dups}"
    assert all(a < b for a, b in itertools.pairwise(got)), f"seqs out of order: {got}"
    assert got == list(range(got[0], got[0] + len(got))), f"seqs skip: {got}"


def assert_errors_unjournaled(errors: list[Msg]) -> None:
    """A store outage is told as OpenAI-style errors that carry no seq (not journaled)."""
    for m in errors:
        assert m.seq is None and "server_event_seq" not in m.event, m.raw
        assert m.event["error"]["type"] == "server_error", m.raw
        assert "Redis" in m.event["error"]["message"], m.raw


def assert_losses_explained(messages: list[Msg], response_id: str, turn: int,
                            words: int) -> int:
    """Every word of the reply the client did not get is accounted for by a
    ``store_unavailable`` error that came before the next word it did get. Returns how
    many words were lost.

    The tone plugin says ``answer to turn N:`` then ``one two three …``; each word is one
    batch (its audio delta and its ``response.output_audio_transcript.delta``), so each
    lost word costs one failed publish, hence one error. Errors may outnumber lost words:
    an append that timed out may have landed after all, and then the word comes late
    (the outbox reconciles with the journal), after its error.
    """
    expected = reply_words(turn, words)
    at = 0  # index in expected of the next word
    errors = lost = 0
    for m in messages:
        if m.code == "store_unavailable":
            errors += 1
        if (m.type != "response.output_audio_transcript.delta"
                or m.event["response_id"] != response_id):
            continue
        word = m.event["delta"].strip()
        assert word in expected[at:], f"word {word!r} out of order (expected from {at})"
        skipped = expected.index(word, at) - at
        lost += skipped
        assert lost <= errors, (
            f"{lost} word(s) lost by {word!r} (seq {m.seq}) but only {errors} error(s); "
            f"messages: {trace(messages)}")
        at += skipped + 1
    return lost


def transcript_of(done: dict[str, Any]) -> str:
    return str(done["response"]["output"][0]["content"][0]["transcript"])


async def turn_completes(s: Stream, turn: int, *, words: int = 4,
                         timeout: float = 15.0) -> dict[str, Any]:
    """Speak a new turn and wait for its completed reply; check that the reply's words and
    audio both answer ``turn``. A reply still streaming is barged in on first."""
    start = len(s.messages)
    await s.send("session.update", session={"instructions": f"words={words}"})
    await s.speak(1.0)
    i = await s.until(lambda m: m.type == "response.done"
                      and m.event["response"]["status"] == "completed",
                      f"a completed reply to turn {turn}", start=start, timeout=timeout)
    done = s.messages[i].event
    text = transcript_of(done)
    assert text.startswith(f"answer to turn {turn}:"), text
    assert len(text.split()) == 4 + words, text
    audio = reply_pcm([m.event for m in s.messages], done["response"]["id"])
    assert len(audio) >= 4800, len(audio)
    assert decode_turn(audio[:4800], RATE) == turn % 16
    return done


async def journal(url: str, session_id: str, after: int = 0) -> list[tuple[int, str]]:
    """A second read of the session's journal, straight from Redis with redis-py."""
    r = aioredis.from_url(url, decode_responses=True, protocol=2)
    try:
        entries = await r.xrange(keys.journal(session_id),
                                 f"({after}-1" if after else "-", "+")
    finally:
        await r.aclose()
    return [(int(entry_id.split("-")[0]), fields["event"]) for entry_id, fields in entries]


async def assert_journaled(url: str, session_id: str, messages: list[Msg]) -> None:
    """Every seq'd message is in the journal of the Redis at ``url``, byte for byte."""
    kept = dict(await journal(url, session_id))
    for m in messages:
        if m.seq is not None:
            assert kept.get(m.seq) == m.raw, f"seq {m.seq} is not journaled at {url}"


async def meta(url: str, session_id: str) -> dict[str, str]:
    """The session's lease record, straight from the Redis at ``url``."""
    r = aioredis.from_url(url, decode_responses=True, protocol=2)
    try:
        return dict(await r.hgetall(keys.meta(session_id)))
    finally:
        await r.aclose()


async def resume(url: str, session_id: str, token: str,
                 cursor: int) -> tuple[Stream, int, dict[str, Any]]:
    """A new socket resuming ``session_id``; the index and body of ``session.resumed``."""
    r = await Stream.open(f"{url}?resume={session_id}")
    await r.send("session.resume", resume_token=token, last_received_server_event_seq=cursor)
    i = await r.until(lambda m: m.type in ("session.resumed", "error"), "session.resumed",
                      timeout=10)
    resumed = r.messages[i].event
    assert resumed["type"] == "session.resumed", resumed
    return r, i, resumed


async def until_heartbeats_acked(s: Stream, timeout: float, what: str) -> None:
    """Send heartbeats until one is acknowledged rather than answered with an error:
    the store took the write, so the gateway is on the (new) primary again."""

    async def acknowledged() -> bool:
        mark = len(s.messages)
        await s.send("session.heartbeat")
        i = await s.until(lambda m: m.type == "session.heartbeat_ack" or m.code is not None,
                          "a heartbeat's answer", start=mark)
        return s.messages[i].type == "session.heartbeat_ack"

    await eventually(acknowledged, timeout, what)


async def start(proc: GatewayProcess) -> GatewayProcess:
    """Start a gateway without stopping the event loop (streams keep being read)."""
    return await asyncio.to_thread(proc.start)
