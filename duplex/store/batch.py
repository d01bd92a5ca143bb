"""The fenced writes of every session in a process, sent together: one pipeline a tick.

Each session's worker awaits its writes one at a time, so N sessions made N small
round trips where one would do, and redis-py's per-command cost (packing, the
pool, a reply parse) was paid N times a tick. ``WriteBatcher`` queues the writes
made while a pipeline is out, or within the loop tick that queued the first of
them, and sends them as the next pipeline: one EVALSHA per write with its own
reply. A pipeline is not a transaction; each script is still atomic and fenced on
its own (I3), so a fenced-out session gets its own ``LeaseLost`` and the other
writes of the batch are untouched.

Order: writes leave in the order they were queued, one pipeline at a time, so a
session's writes reach Redis in the order it made them (I4).

One deadline per batch, its oldest write's: every caller hears within
``timeout_s`` of queueing its write, as with a call of its own; a write still
queued when its deadline passes fails unsent. No timer per command: the client
the store uses has no per-command socket timeout (``connect(socket_timeouts=False)``).

With ``replica_acks``, a batch holding a durable write (a journaled event, an
epoch) ends with one WAIT; it covers every write before it on the connection.

On a cluster a batch is split by the primary that holds each write's slot: one
pipeline (and one WAIT) per primary, sent together. A session's keys share one
slot, so its writes still reach one server in order. A write answered MOVED (its
slot went to another primary) is sent once more after the map of slots is asked
again; other slot trouble (ASK, TRYAGAIN, CLUSTERDOWN) is ``StoreUnavailable``.

Bounded (I8): ``BatchLimits``. A write beyond ``max_queued`` is refused as
``StoreUnavailable``: a store that far behind is down, to its callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript

from duplex.errors import StoreUnavailable
from duplex.store.client import follow_primary
from duplex.store.errors import domain_error
from duplex.store.nodes import Nodes


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_batch: int = 256  # writes per pipeline
    max_batch_bytes: int = 1024 * 1024  # of event text per pipeline (one larger write goes alone)
    max_queued: int = 8192  # writes waiting for a pipeline, all sessions together


DEFAULT_LIMITS = BatchLimits()


@dataclass(slots=True)
class _Write:
    op: str
    script: AsyncScript
    keys: list[str]
    args: list[Any]
    durable: bool
    size: int
    due: float  # loop time of its deadline
    done: asyncio.Future[Any]


class WriteBatcher:
    def __init__(self, nodes: Nodes, *, timeout_s: float | None,
                 replica_acks: int, wait_ms: int,
                 limits: BatchLimits = DEFAULT_LIMITS) -> None:
        self._nodes = nodes
        self._timeout_s = timeout_s
        self._replica_acks = replica_acks
        self._wait_ms = wait_ms
        self.limits = limits
        self._queue: deque[_Write] = deque()
        self._task: asyncio.Task[None] | None = None
        # one connection per primary, taken from its client's pool and kept
        self._conns: dict[int, tuple[aioredis.Redis, Connection]] = {}
        self.pipelines = 0  # sent, for tests and the curious
        self.writes = 0

    async def write(self, op: str, script: AsyncScript, keys: list[str], args: list[Any],
                    *, durable: bool = False, size: int = 0) -> Any:
        """Run ``script`` in the next pipeline; its reply, or its own error."""
        if len(self._queue) >= self.limits.max_queued:
            raise StoreUnavailable(f"{op} refused: {self.limits.max_queued} Redis writes are "
                                   "already waiting")
        loop = asyncio.get_running_loop()
        due = loop.time() + self._timeout_s if self._timeout_s is not None else math.inf
        done: asyncio.Future[Any] = loop.create_future()
        self._queue.append(_Write(op, script, keys, args, durable, size, due, done))
        if self._task is None:  # it starts next tick: this tick's writes join the batch
            self._task = loop.create_task(self._drain(), name="store-write-batcher")
        return await done

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while self._queue:
            _fail(self._queue.popleft(), StoreUnavailable("the store is closed"))
        conns, self._conns = self._conns, {}
        for node, conn in conns.values():
            await node.connection_pool.release(conn)

    async def _exchange(self, node: aioredis.Redis,
                        commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` at once and read every reply, on the batcher's own
        connection (one batch is out at a time): redis-py's ``Pipeline`` costs about
        as much again as the commands (its pool round, reset and bookkeeping). A
        connection found broken (say the server restarted since) is connected again
        and the whole batch sent once more, as redis-py retries a pipeline: every
        script is safe to run twice. The connect has its own bounded retries."""
        if id(node) not in self._conns:
            taken = await node.connection_pool.get_connection()  # type: ignore[no-untyped-call]
            self._conns[id(node)] = (node, taken)
        conn = self._conns[id(node)][1]
        for attempt in range(2):
            if not conn.is_connected:
                # the class's own connect: a Sentinel-managed one asks for the primary
                # (send_packed_command would reconnect to the address it last had)
                await conn.connect()  # type: ignore[no-untyped-call]
            try:
                return await _send_and_read(conn, commands)
            except (rx.ConnectionError, rx.TimeoutError):
                await conn.disconnect()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                if batch:
                    await self._send(batch)
        finally:
            self._task = None

    def _take(self) -> list[_Write]:
        now = asyncio.get_running_loop().time()
        batch: list[_Write] = []
        size = 0
        limits = self.limits
        while self._queue and len(batch) < limits.max_batch:
            w = self._queue[0]
            if batch and size + w.size > limits.max_batch_bytes:
                break
            self._queue.popleft()
            if w.done.done():  # its caller gave up (cancelled): never sent
                continue
            if w.due <= now:
                _fail(w, self._late(w.op))
                continue
            batch.append(w)
            size += w.size
        return batch

    def _late(self, op: str) -> StoreUnavailable:
        return StoreUnavailable(f"Redis did not answer {op} within {self._timeout_s} s")

    async def _send(self, batch: list[_Write]) -> None:
        due = min(w.due for w in batch)
        try:
            async with asyncio.timeout_at(due if due < math.inf else None):
                await self._nodes.discover()
                replies = await self._replies(batch)
        except TimeoutError:
            self._nodes.stale()
            for w in batch:
                _fail(w, self._late(w.op))
            return
        except rx.RedisError as exc:  # the connection, after redis-py's retries
            self._nodes.heard(exc)
            for w in batch:
                _fail(w, domain_error(w.op, exc))
            return
        except BaseException as exc:
            for w in batch:
                _fail(w, StoreUnavailable(f"{w.op} interrupted: {type(exc).__name__}"))
            raise
        self.pipelines += 1
        self.writes += len(batch)
        for w, reply in zip(batch, replies, strict=True):
            if w.done.done():
                continue
            if isinstance(reply, BaseException):
                w.done.set_exception(reply)
            else:
                w.done.set_result(reply)

    async def _replies(self, batch: list[_Write]) -> list[Any]:
        """Each write's reply or error, with one reload of scripts a restarted server
        lost (NOSCRIPT), as ``register_script`` objects do one at a time."""
        replies = await self._per_node(batch)
        missing = [i for i, r in enumerate(replies) if isinstance(r, rx.NoScriptError)]
        moved = [i for i, r in enumerate(replies) if isinstance(r, _Moved)]
        if moved:
            await self._nodes.refresh(moved=True)
        if missing or moved:
            # A session has one write in flight (its worker awaits it), so re-sending
            # these alone cannot put one of its writes behind a later one.
            for i in missing:
                node = self._nodes.for_key(batch[i].keys[0])
                await node.script_load(batch[i].script.script)
            again_at = sorted(missing + moved)
            again = await self._per_node([batch[i] for i in again_at])
            for i, reply in zip(again_at, again, strict=True):
                replies[i] = reply
        return [r.error if isinstance(r, _Moved) else r for r in replies]

    async def _per_node(self, batch: Sequence[_Write]) -> list[Any]:
        """One pipeline per primary, sent together; replies in ``batch``'s order."""
        if not self._nodes.clustered:  # one server: one pipeline, no write looked up
            return await self._pipeline(self._nodes.for_key(batch[0].keys[0]), batch)
        groups: dict[int, list[int]] = {}
        nodes: dict[int, aioredis.Redis] = {}
        for i, w in enumerate(batch):
            node = self._nodes.for_key(w.keys[0])
            groups.setdefault(id(node), []).append(i)
            nodes[id(node)] = node
        if len(groups) == 1:
            return await self._pipeline(next(iter(nodes.values())), batch)
        answers = await asyncio.gather(*(
            self._pipeline(nodes[g], [batch[i] for i in members])
            for g, members in groups.items()))
        replies: list[Any] = [None] * len(batch)
        for members, answer in zip(groups.values(), answers, strict=True):
            for i, reply in zip(members, answer, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, node: aioredis.Redis, batch: Sequence[_Write]) -> list[Any]:
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", w.script.sha, len(w.keys), *w.keys, *w.args) for w in batch]
        durable = self._replica_acks > 0 and any(w.durable for w in batch)
        if durable:
            commands.append(("WAIT", self._replica_acks, self._wait_ms))
        raw = await self._exchange(node, commands)
        replies = raw[:len(batch)]  # the WAIT's, if any, left out
        for i, r in enumerate(raw):  # errors are rare: each reply looked at once
            if isinstance(r, rx.RedisError):
                self._nodes.heard(r)
                if i < len(batch):
                    replies[i] = _reply(batch[i].op, r)
        if durable:
            acked = int(raw[-1])
            if acked < self._replica_acks:
                # perhaps a deposed primary: the retry should reach the new one
                await follow_primary(node)
                self._nodes.stale()
                for i, w in enumerate(batch):
                    if w.durable and not isinstance(replies[i], BaseException):
                        replies[i] = StoreUnavailable(
                            f"{w.op} reached {acked} of {self._replica_acks} Redis "
                            f"replica(s) within {self._wait_ms} ms, so it does not count")
        return replies


def pack(commands: Sequence[tuple[Any, ...]]) -> bytes:
    """``commands`` in RESP, as redis-py packs them (``str`` as UTF-8, ``int`` and
    ``float`` as their decimal text, ``bytes`` as they are) in one buffer: its
    packer costs about twice as much for a journal append (15 against 7 us), and
    the batcher packs every write it sends."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, int | float) and not isinstance(arg, bool):
                data = repr(arg).encode()
            else:  # as redis-py refuses them: a caller bug, not a store error
                raise TypeError(f"a Redis argument must be str, bytes, int or float, "
                                f"not {type(arg).__name__}")
            out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


async def _send_and_read(conn: Connection, commands: list[tuple[Any, ...]]) -> list[Any]:
    await conn.send_packed_command(pack(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(await conn.read_response())
        except rx.ResponseError as exc:  # this command's error; read on: the rest follow
            replies.append(exc)
    return replies


@dataclass(frozen=True, slots=True)
class _Moved:
    """A write answered MOVED: sent again once the slots are known anew."""

    error: Exception


def _reply(op: str, reply: Any) -> Any:
    if isinstance(reply, rx.NoScriptError) or not isinstance(reply, rx.RedisError):
        return reply
    if isinstance(reply, rx.MovedError):
        return _Moved(domain_error(op, reply))
    return domain_error(op, reply)


def _fail(w: _Write, exc: BaseException) -> None:
    if not w.done.done():
        w.done.set_exception(exc)

