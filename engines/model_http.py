"""HTTP to a model server apart from the gateway, on asyncio and ``h11``.

``h11`` is uvicorn's HTTP/1.1 parser, already a dependency, so talking to an
OpenAI-compatible server needs no client library. One request is one
connection (``Connection: close``): closing it is how a stream is stopped —
the server sees its client go and cancels the generation (llama.cpp and vLLM
both do), which is what a barge-in needs, at once, not at the next token.

Every wait on the server is bounded by ``timeout_s``: connecting, the answer's
head, and each read of its body (a stream's chunks may come slowly, but never
further apart than that). Failures are split by cause (``ServerDown``,
``ServerSilent``, ``ServerRefused``, ``ServerBroken``); the engine turns them
into one clear line for the session. ``Endpoint.parse`` and ``failures`` are
shared with the speech servers' clients (``plugins.cascade.remote_asr``,
``remote_tts``), which block a worker thread on ``http.client`` instead: a
server is named, and its silence or absence worded, the same way for all.

``ServerGate`` bounds the streams one process holds open on a server, with a
bounded queue before it: past the queue a request fails at once
(``ServerBusy``) instead of piling up on a server that is already behind. The
thinker waits for a slot on its event loop, the speech clients on their
stage's worker threads: one gate serves either.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11

READ_BYTES = 65536
MAX_ERROR_BYTES = 4096  # of an error answer's body, kept for its message


class ModelServerError(Exception):
    """A model server could not serve a request; the message says why, for people."""


class ServerDown(ModelServerError):
    """Nothing answered: connection refused, reset or unresolvable."""


class ServerSilent(ModelServerError):
    """The server said nothing for longer than the timeout."""


class ServerRefused(ModelServerError):
    """The server answered with an HTTP error (its message kept)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerBroken(ModelServerError):
    """The server's answer was not HTTP or not the stream it should be."""


class ServerBusy(ModelServerError):
    """This process already waits on the server as much as it may."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a server's API lives: ``http[s]://HOST[:PORT]/BASE``."""

    host: str
    port: int
    tls: bool
    base: str  # the path before each route, without its trailing slash

    @classmethod
    def parse(cls, url: str, server: str = "model server") -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: a {server}'s URL is http[s]://HOST[:PORT]/PATH")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls,
                   parts.path.rstrip("/"))

    def __str__(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}{self.base}"


@contextlib.contextmanager
def failures(where: str, timeout_s: float, *, connecting: bool = False,
             server: str = "model server") -> Iterator[None]:
    """A wait on the server at ``where``: its timeout is ``ServerSilent``, a
    socket's error ``ServerDown``, each in words that say which and whether the
    connection was being made (``connecting``) or already open."""
    try:
        yield
    except TimeoutError:
        silence = (f"did not accept a connection within {timeout_s:g} s" if connecting
                   else f"said nothing for {timeout_s:g} s")
        raise ServerSilent(f"the {server} at {where} {silence}") from None
    except OSError as exc:
        loss = "is unreachable" if connecting else "dropped the connection"
        raise ServerDown(f"the {server} at {where} {loss}: {exc.strerror or exc}") from None


class Response:
    """An answer's status and its body, read as it comes; ``close`` drops the
    connection (mid-body: the server sees the disconnect)."""

    def __init__(self, status: int, conn: h11.Connection, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, timeout_s: float, where: str) -> None:
        self.status = status
        self._conn = conn
        self._reader = reader
        self._writer = writer
        self._timeout_s = timeout_s
        self._where = where

    async def body(self) -> AsyncIterator[bytes]:
        while True:
            event = await _next_event(self._conn, self._reader, self._timeout_s, self._where)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def text(self, limit: int = MAX_ERROR_BYTES) -> str:
        got = b""
        async for data in self.body():
            got += data
            if len(got) >= limit:
                break
        return got[:limit].decode("utf-8", "replace")

    def close(self) -> None:
        self._writer.close()


@contextlib.asynccontextmanager
async def request(endpoint: Endpoint, method: str, route: str, *, body: bytes = b"",
                  headers: Mapping[str, str] | None = None,
                  timeout_s: float) -> AsyncIterator[Response]:
    """One HTTP request to ``endpoint``'s ``route``; the response's connection
    is closed on leaving (at once, whatever is left unread)."""
    where = f"{endpoint}{route}"
    with failures(where, timeout_s, connecting=True):
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                endpoint.host, endpoint.port,
                ssl=ssl.create_default_context() if endpoint.tls else None)
    try:
        conn = h11.Connection(h11.CLIENT)
        head = [("Host", endpoint.host), ("Connection", "close"),
                ("Content-Length", str(len(body))), *(headers or {}).items()]
        writer.write(conn.send(h11.Request(method=method, target=endpoint.base + route,
                                           headers=head)))
        writer.write(conn.send(h11.Data(data=body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        event = await _next_event(conn, reader, timeout_s, where)
        if not isinstance(event, h11.Response):
            raise ServerBroken(f"the model server at {where} closed without answering")
        yield Response(event.status_code, conn, reader, writer, timeout_s, where)
    finally:
        writer.close()


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader, timeout_s: float,
                      where: str) -> Any:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise ServerBroken(f"the model server at {where} broke HTTP: {exc}") from None
        if event is not h11.NEED_DATA:
            return event
        with failures(where, timeout_s):
            async with asyncio.timeout(timeout_s):
                data = await reader.read(READ_BYTES)
        conn.receive_data(data)


class BlockingAnswer:
    """An answer read on a worker thread (``blocking_post``): every read bounded
    by the timeout and its failures split by cause, as ``Response``'s are."""

    def __init__(self, answer: http.client.HTTPResponse, where: str, timeout_s: float,
                 server: str) -> None:
        self.status = answer.status
        self._answer = answer
        self._where = where
        self._timeout_s = timeout_s
        self._server = server

    def read(self, size: int = READ_BYTES) -> bytes:
        """Up to ``size`` bytes as soon as some come (b"" at the end)."""
        with failures(self._where, self._timeout_s, server=self._server):
            return self._answer.read1(size)

    def text(self, limit: int = MAX_ERROR_BYTES) -> str:
        got = b""
        while len(got) < limit and (data := self.read()):
            got += data
        return got[:limit].decode("utf-8", "replace")


@contextlib.contextmanager
def blocking_post(endpoint: Endpoint, route: str, body: bytes, *, headers: Mapping[str, str],
                  timeout_s: float, server: str) -> Iterator[BlockingAnswer]:
    """One POST on the standard library's ``http.client``, for a caller that
    may block its thread (a stage's worker); the connection is closed on
    leaving, whatever is left unread."""
    where = f"{endpoint}{route}"
    kind = http.client.HTTPSConnection if endpoint.tls else http.client.HTTPConnection
    conn = kind(endpoint.host, endpoint.port, timeout=timeout_s)
    try:
        with failures(where, timeout_s, connecting=True, server=server):
            conn.connect()
        with failures(where, timeout_s, server=server):
            conn.request("POST", endpoint.base + route, body,
                         {"Content-Length": str(len(body)), **headers})
            try:
                answer = conn.getresponse()
            except http.client.HTTPException as exc:
                raise ServerBroken(f"the {server} at {where} broke HTTP: {exc!r}") from None
        yield BlockingAnswer(answer, where, timeout_s, server)
    finally:
        conn.close()


def server_events(data: bytes, pending: bytearray) -> list[str]:
    """Server-sent events: the ``data`` fields of the events ``data`` completes
    (``pending`` keeps an unfinished line across calls)."""
    pending += data
    lines = pending.split(b"\n")
    pending[:] = lines.pop()
    out: list[str] = []
    for raw in lines:
        line = raw.rstrip(b"\r")
        if line.startswith(b"data:"):
            out.append(line[5:].strip().decode("utf-8", "replace"))
    return out


class ServerGate:
    """At most ``max_streams`` streams open on one server, ``max_waiting`` more
    queued for a slot (each for at most ``timeout_s``); past that, ``ServerBusy``.

    One gate per server per process, taken from one side: the thinker's on its
    event loop (``slot``), a speech server's on its stage's worker threads
    (``held``). ``flags`` names the flags that set the bounds (``llm``:
    ``--llm-max-streams``, ``--llm-max-waiting``) and ``server`` the kind of
    server, so that a busy server is worded the same for all. ``open`` and
    ``waiting`` are read by the metrics."""

    def __init__(self, where: str, max_streams: int, max_waiting: int, timeout_s: float, *,
                 flags: str = "llm", server: str = "model server") -> None:
        self._where = where
        self._slots = asyncio.Semaphore(max_streams)
        self._freed = threading.Condition()  # the threads' side: ``open`` fell
        self._max_streams = max_streams
        self._max_waiting = max_waiting
        self._timeout_s = timeout_s
        self._flags = flags
        self._server = server
        self.open = 0
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A stream's slot, for a task on the event loop."""
        self._join(full=self._slots.locked())
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise self._no_slot() from None
        finally:
            self.waiting -= 1
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1
            self._slots.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A stream's slot, for a worker thread (it blocks while it waits)."""
        with self._freed:
            self._join(full=self.open >= self._max_streams)
            try:
                free = self._freed.wait_for(lambda: self.open < self._max_streams,
                                            self._timeout_s)
            finally:
                self.waiting -= 1
            if not free:
                raise self._no_slot()
            self.open += 1
        try:
            yield
        finally:
            with self._freed:
                self.open -= 1
                self._freed.notify()

    def _join(self, *, full: bool) -> None:
        """Queue for a slot, or refuse at once when the queue is full too."""
        if full and self.waiting >= self._max_waiting:
            raise ServerBusy(f"the {self._server} at {self._where} is busy: {self.open} "
                             f"streams open and {self.waiting} waiting "
                             f"(--{self._flags}-max-streams {self._max_streams}, "
                             f"--{self._flags}-max-waiting {self._max_waiting})")
        self.waiting += 1

    def _no_slot(self) -> ServerBusy:
        return ServerBusy(f"no stream to the {self._server} at {self._where} came free "
                          f"within {self._timeout_s:g} s ({self.open} open)")
