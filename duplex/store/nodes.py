"""Which server holds a key: the one primary, or on a Valkey/Redis Cluster the
primary that owns the key's hash slot now."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis import exceptions as rx


class Nodes:
    """One primary (or the one Sentinel names): every key lives there."""

    @staticmethod
    def of(client: aioredis.Redis) -> Nodes:
        return Nodes(client)

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    def for_key(self, key: str) -> aioredis.Redis:
        return self._client

    def every(self) -> list[aioredis.Redis]:
        """One client per primary."""
        return [self._client]

    def heard(self, exc: rx.RedisError) -> None:
        """A reply or failure that may mean the slots moved (MOVED, ASK, a node gone)."""

    def stale(self) -> None:
        """The topology should be asked again before the next call."""

    async def refresh(self) -> None:
        """Ask the topology again now (after MOVED)."""

    async def aclose(self) -> None:
        await self._client.aclose()
