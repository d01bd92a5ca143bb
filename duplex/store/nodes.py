"""Which server holds a key: the one primary, or on a Valkey/Redis Cluster the
primary that owns the key's hash slot now.

``--redis-url redis://HOST:PORT`` may name any node of a cluster: the first
``discover()`` (the store's ``ping``, which the gateway runs before it is ready)
asks that server ``INFO cluster``. On a cluster, redis-py's ``RedisCluster`` keeps
the map of slots (``CLUSTER SLOTS``, asked again after MOVED or a node that stops
answering), and each primary gets a plain client built with the seed's own
options (timeouts, retries, protocol, credentials): the store's scripts, its
WAITs and the write batcher's pipelines run on the connection of the primary
that holds their slot, which ``RedisCluster`` itself does not offer (a WAIT must
follow its write on the same connection).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

# Replies and failures after which the map of slots may be out of date.
_TOPOLOGY = (rx.AskError, rx.ClusterDownError, rx.TryAgainError, rx.ReadOnlyError,
             rx.ConnectionError, rx.TimeoutError)
_REFRESH_EVERY_S = 0.2  # at most, however many calls fail together


class Nodes:
    """One client per primary; a plain server (or Sentinel's primary) is one."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._seed = client
        self._cluster: RedisCluster | None = None
        self._checked = False
        self._discovering = asyncio.Lock()
        self._stale = False
        self._moved = False  # a MOVED was heard: the next refresh is not put off
        self._refreshed = 0.0
        self._clients: dict[tuple[str, int], aioredis.Redis] = {}

    @property
    def clustered(self) -> bool:
        return self._cluster is not None

    def for_key(self, key: str) -> aioredis.Redis:
        if self._cluster is None:
            return self._seed
        node = self._cluster.nodes_manager.get_node_from_slot(key_slot(key.encode()))
        return self._client(node.host, int(node.port))

    def every(self) -> list[aioredis.Redis]:
        """One client per primary."""
        if self._cluster is None:
            return [self._seed]
        return [self._client(n.host, int(n.port)) for n in self._cluster.get_primaries()]

    def heard(self, exc: BaseException) -> None:
        """A reply or failure that may mean the slots moved (MOVED, ASK, a node gone)."""
        if isinstance(exc, _TOPOLOGY):
            self._stale = True
            self._moved = self._moved or isinstance(exc, rx.MovedError)

    def stale(self) -> None:
        """The map of slots should be asked again before the next call."""
        self._stale = True

    async def discover(self) -> None:
        """Learn once whether the seed is a cluster node; later, ask the map of
        slots again if a call found it stale."""
        if not self._checked:
            async with self._discovering:  # two first calls at once ask once
                if not self._checked:
                    await self._check()
        elif self._stale:
            await self.refresh(moved=self._moved)

    async def _check(self) -> None:
        info = await self._seed.info("cluster")
        if int(info.get("cluster_enabled", 0)):
            cluster = self._topology()
            try:
                await cluster.initialize()
            except BaseException:
                await cluster.aclose()
                raise
            self._cluster = cluster
            self._refreshed = time.monotonic()
            self._stale = False
        self._checked = True

    async def refresh(self, *, moved: bool = False) -> None:
        """Ask the map of slots again: at once after MOVED (the slot has moved for
        sure), else at most every ``_REFRESH_EVERY_S`` (a failing node makes every
        call fail together)."""
        if self._cluster is None:
            if not self._checked:
                await self.discover()
            return
        if not moved and time.monotonic() - self._refreshed < _REFRESH_EVERY_S:
            return
        self._refreshed = time.monotonic()
        self._stale = self._moved = False
        await self._cluster.nodes_manager.initialize()

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        if self._cluster is not None:
            await self._cluster.aclose()
        await self._seed.aclose()

    def _options(self) -> dict[str, Any]:
        pool = self._seed.connection_pool
        options = dict(pool.connection_kwargs)
        for unique in ("host", "port", "path", "db"):
            options.pop(unique, None)
        return options

    def _topology(self) -> RedisCluster:
        seed = self._seed.connection_pool.connection_kwargs
        options = self._options()
        keep = ("username", "password", "protocol", "decode_responses", "socket_timeout",
                "socket_connect_timeout", "retry", "ssl")
        return RedisCluster(host=seed["host"], port=seed["port"],
                            **{k: options[k] for k in keep if k in options})

    def _client(self, host: str, port: int) -> aioredis.Redis:
        client = self._clients.get((host, port))
        if client is None:
            pool = self._seed.connection_pool
            new = aioredis.BlockingConnectionPool(
                connection_class=pool.connection_class, host=host, port=port,
                max_connections=pool.max_connections,
                timeout=getattr(pool, "timeout", None), **self._options())
            client = self._clients[(host, port)] = aioredis.Redis(connection_pool=new)
        return client
