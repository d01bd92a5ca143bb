"""Ended sessions are kept for a while (a late resume learns they ended), within a
store-wide byte budget: past it the oldest go first, keys and all
(``retain`` in ``_lib.lua``; docs/store.md "Budgets")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import cast

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer
from store_helpers import NOW, OWNER, open_session

from duplex import lease
from duplex.store import RedisSessionStore, connect, keys

PAYLOAD = "x" * 100_000
EXPIRED = json.dumps({"type": "session.expired", "event_id": "event_x",
                      "reason": lease.ExpiryReason.IDLE_TTL.value, "server_event_seq": 0},
                     separators=(",", ":"))


def small_store(redis_server: RedisServer, budget: int,
                ended_ttl_s: float = 300.0) -> RedisSessionStore:
    return RedisSessionStore(connect(redis_server.url), retained_max_bytes=budget,
                             ended_ttl_s=ended_ttl_s)


@pytest.fixture
async def budgeted(redis_server: RedisServer) -> AsyncIterator[RedisSessionStore]:
    store = small_store(redis_server, 350_000)
    try:
        yield store
    finally:
        await store.close()


async def ended_with_history(store: RedisSessionStore, sid: str) -> None:
    record = await open_session(store, sid)
    await store.history_append(sid, OWNER, record.incarnation, "i1", PAYLOAD)
    assert await store.close_session(sid, OWNER, record.incarnation)


async def test_the_oldest_ended_sessions_go_first_past_the_budget(
        budgeted: RedisSessionStore, raw: aioredis.Redis) -> None:
    for n in range(5):  # about 100 KB each: three fit in 350 KB
        await ended_with_history(budgeted, f"s{n}")
    kept = cast(list[str], await raw.zrange(keys.RETAINED, 0, -1))
    assert kept == ["s2", "s3", "s4"]
    assert await raw.exists(keys.meta("s0"), keys.items("s0"), keys.history("s0")) == 0
    assert await raw.exists(keys.meta("s4"), keys.items("s4")) == 2
    sizes = cast(dict[str, str], await raw.hgetall(keys.RETAINED_SIZES))
    assert sorted(sizes) == ["*", "s2", "s3", "s4"]
    assert int(sizes["*"]) == sum(int(sizes[s]) for s in kept) <= 350_000
    assert all(int(sizes[s]) > len(PAYLOAD) for s in kept)


async def test_a_session_ended_twice_is_counted_once(budgeted: RedisSessionStore,
                                                     raw: aioredis.Redis) -> None:
    record = await open_session(budgeted, "s1")
    assert await budgeted.close_session("s1", OWNER, record.incarnation)
    assert not await budgeted.close_session("s1", OWNER, record.incarnation)
    sizes = await raw.hgetall(keys.RETAINED_SIZES)
    assert int(sizes["*"]) == int(sizes["s1"])


async def test_sessions_past_their_retention_leave_the_count(redis_server: RedisServer,
                                                             raw: aioredis.Redis) -> None:
    store = small_store(redis_server, 10**9, ended_ttl_s=0.05)
    try:
        await ended_with_history(store, "old")
        await asyncio.sleep(0.1)  # its keys expire: the retention itself, not a race
        await ended_with_history(store, "new")
    finally:
        await store.close()
    assert await raw.zrange(keys.RETAINED, 0, -1) == ["new"]
    sizes = await raw.hgetall(keys.RETAINED_SIZES)
    assert sorted(sizes) == ["*", "new"] and sizes["*"] == sizes["new"]


async def test_a_reaped_session_counts_as_an_ended_one(budgeted: RedisSessionStore,
                                                       raw: aioredis.Redis) -> None:
    await open_session(budgeted, "s1", idle_ttl_s=1.0)
    assert await budgeted.claim_expired(OWNER, NOW + 2) == [
        ("s1", lease.ExpiryReason.IDLE_TTL.value, OWNER)]
    assert await budgeted.finish_expiry("s1", OWNER, EXPIRED) == 1
    assert await raw.zrange(keys.RETAINED, 0, -1) == ["s1"]
    assert int(cast(str, await raw.hget(keys.RETAINED_SIZES, "*"))) > 0
