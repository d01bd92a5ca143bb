"""Helpers shared by the store tests (named to avoid clashing with other dirs)."""

from __future__ import annotations

from collections.abc import Callable

import redis.asyncio as aioredis

from duplex.store import RedisSessionStore, SessionRecord, keys

NOW = 1_700_000_000.0
OWNER = "gw-a"
CONFIG = '{"voice": "alloy"}'


async def open_session(
    store: RedisSessionStore,
    sid: str = "s1",
    *,
    owner: str = OWNER,
    digest: str = "digest-1",
    max_sessions: int = 100,
    per_owner: int = 0,
    idle_ttl_s: float | None = 60.0,
    grace_s: float = 30.0,
    now: float = NOW,
) -> SessionRecord:
    return await store.open_session(
        sid, owner=owner, token_digest=digest, config=CONFIG, now=now,
        max_sessions=max_sessions, max_sessions_per_owner=per_owner,
        idle_ttl_s=idle_ttl_s, grace_s=grace_s,
    )


def leases_of(sid: str) -> str:
    """The lease index of ``sid``'s bucket."""
    return keys.leases(keys.bucket_of(sid))


async def indexed(raw: aioredis.Redis, index: Callable[[int], str]) -> int:
    """How many sessions one kind of bucket index holds, every bucket together."""
    pipe = raw.pipeline(transaction=False)
    for bucket in range(keys.BUCKETS):
        pipe.zcard(index(bucket))
    return sum(await pipe.execute())
