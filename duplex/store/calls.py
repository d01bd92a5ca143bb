"""How the store calls Redis: one deadline per call, errors as domain errors, each
call on the server that holds its keys' slot, and WAIT where a write must
outlive a failover."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.commands.core import AsyncScript

from duplex.errors import StoreUnavailable
from duplex.store._scripts import Scripts
from duplex.store.client import follow_primary
from duplex.store.errors import domain_error
from duplex.store.nodes import Nodes

T = TypeVar("T")


class StoreCalls:
    """The calls every part of ``RedisSessionStore`` makes. It owns ``client``."""

    def __init__(self, client: aioredis.Redis, *, timeout_s: float | None,
                 replica_acks: int) -> None:
        if replica_acks < 0:
            raise ValueError("replica_acks must be >= 0")
        self._r = client
        self._nodes = Nodes(client)
        self._timeout_s = timeout_s
        self._replica_acks = replica_acks
        # WAIT must answer well inside the operation's own timeout
        self._wait_ms = max(1, int(1000 * (timeout_s or 5.0) / 2))
        self._s = Scripts.register(client)

    def _node(self, key: str) -> aioredis.Redis:
        """The client of the primary that holds ``key``'s slot."""
        return self._nodes.for_key(key)

    async def _run(self, op: str, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._nodes.discover()
                return await call
        except TimeoutError as exc:
            self._nodes.stale()
            raise StoreUnavailable(
                f"Redis did not answer {op} within {self._timeout_s} s"
            ) from exc
        except rx.RedisError as exc:
            self._nodes.heard(exc)
            raise domain_error(op, exc) from exc

    def _script(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Awaitable[Any]:
        return script(keys=keys, args=args, client=self._node(keys[0]))

    async def _durable(self, op: str, script: AsyncScript, keys: list[str],
                       args: list[Any]) -> Any:
        """Run a script whose effect must outlive a failover (a lease grant, a
        journaled event). With ``replica_acks``, WAIT on the same connection until
        that many replicas hold it; fewer means not done, because asynchronous
        replication loses acknowledged writes when the primary fails over
        (research/redis.md §6.3: a fencing epoch went back from 11 to 10)."""
        if not self._replica_acks:
            return await self._run(op, self._script(script, keys, args))
        node = self._node(keys[0])
        pipe = node.pipeline(transaction=False)
        await script(keys=keys, args=args, client=pipe)
        pipe.execute_command("WAIT", self._replica_acks, self._wait_ms)
        # raise_on_error would rewrite a script's "CODE message" into "Command # 1 …"
        result, acked = await self._run(op, pipe.execute(raise_on_error=False))
        if isinstance(result, rx.RedisError):
            self._nodes.heard(result)
            raise domain_error(op, result)
        if int(acked) < self._replica_acks:
            # perhaps a deposed primary: the retry should reach the new one
            await self._run("follow_primary", follow_primary(node))
            self._nodes.stale()
            raise StoreUnavailable(
                f"{op} reached {acked} of {self._replica_acks} Redis replica(s) within "
                f"{self._wait_ms} ms, so it does not count")
        return result
