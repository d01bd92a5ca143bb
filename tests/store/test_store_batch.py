"""The write batcher: one pipeline for the writes of many sessions, each with its
own reply and its own error, in order, bounded, under one deadline per batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer
from store_helpers import NOW, OWNER, open_session

from duplex.errors import LeaseLost, StoreUnavailable
from duplex.store import RedisSessionStore, connect
from duplex.store.batch import BatchLimits

SIDS = [f"s{i}" for i in range(6)]


def ev(seq: int) -> tuple[int, str]:
    return (seq, f'{{"seq":{seq}}}')


@pytest.fixture
async def sessions(store: RedisSessionStore) -> list[str]:
    for sid in SIDS:
        await open_session(store, sid)
    return SIDS


@pytest.fixture
async def untimed(redis_server: RedisServer) -> AsyncIterator[RedisSessionStore]:
    # as the gateway builds it: no per-command socket timeout, the store's deadline
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.3, socket_timeouts=False),
                              timeout_s=0.5)
    try:
        yield store
    finally:
        await store.close()


async def test_the_writes_of_one_tick_share_one_pipeline(
        sessions: list[str], store: RedisSessionStore) -> None:
    sent = store.batch.pipelines
    lasts = await asyncio.gather(*(
        store.append_events(sid, OWNER, 1, [ev(1), ev(2)], max_len=100, now=NOW + 1)
        for sid in sessions))
    assert lasts == [2] * len(sessions)
    assert store.batch.pipelines == sent + 1
    for sid in sessions:
        assert await store.read_journal(sid, 0) == [ev(1), ev(2)]


async def test_a_fenced_out_session_gets_its_own_error_and_spoils_nothing(
        sessions: list[str], store: RedisSessionStore) -> None:
    stale = sessions[2]
    results = await asyncio.gather(*(
        store.append_events(sid, OWNER, 2 if sid == stale else 1, [ev(1)], max_len=100)
        for sid in sessions), return_exceptions=True)
    assert isinstance(results[2], LeaseLost)
    assert [r for i, r in enumerate(results) if i != 2] == [1] * (len(sessions) - 1)
    assert await store.read_journal(stale, 0) == []
    assert await store.read_journal(sessions[3], 0) == [ev(1)]


async def test_i4_one_sessions_writes_land_in_the_order_made(
        sessions: list[str], store: RedisSessionStore) -> None:
    # queued in one tick without awaiting: a gap would be refused (journal_gap)
    writes = [store.append_events("s0", OWNER, 1, [ev(seq)], max_len=100)
              for seq in range(1, 21)]
    assert await asyncio.gather(*writes) == list(range(1, 21))
    assert await store.read_journal("s0", 0) == [ev(seq) for seq in range(1, 21)]


async def test_batches_are_bounded(redis_url: str) -> None:
    limits = BatchLimits(max_batch=2, max_batch_bytes=20, max_queued=5)
    store = RedisSessionStore(connect(redis_url), batch_limits=limits)
    try:
        for sid in SIDS:
            await open_session(store, sid)
        sent = store.batch.pipelines
        await asyncio.gather(*(store.renew(sid, OWNER, 1, NOW + 1) for sid in SIDS[:5]))
        assert store.batch.pipelines == sent + 3  # 2 + 2 + 1
        # bytes: an event of 12 characters each, two of them exceed 20
        await asyncio.gather(*(store.append_events(sid, OWNER, 1, [(1, "x" * 12)], max_len=9)
                               for sid in SIDS[:2]))
        assert store.batch.pipelines == sent + 5
        big = await store.append_events("s2", OWNER, 1, [(1, "y" * 100)], max_len=9)
        assert big == 1  # larger than a batch: it goes alone
        queued = [asyncio.ensure_future(store.renew(sid, OWNER, 1, NOW + 2)) for sid in SIDS]
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert results[:5] == [None] * 5
        assert isinstance(results[5], StoreUnavailable)
        assert "already waiting" in str(results[5])
    finally:
        await store.close()


async def test_a_cancelled_callers_queued_write_is_never_sent(
        sessions: list[str], store: RedisSessionStore) -> None:
    write = asyncio.ensure_future(store.append_events("s0", OWNER, 1, [ev(1)], max_len=9))
    await asyncio.sleep(0)  # queued; the pipeline goes out next tick
    write.cancel()
    assert await store.append_events("s1", OWNER, 1, [ev(1)], max_len=9) == 1
    assert await store.read_journal("s0", 0) == []


async def test_scripts_a_restarted_server_lost_are_loaded_again(
        sessions: list[str], store: RedisSessionStore, raw: aioredis.Redis) -> None:
    await store.renew("s0", OWNER, 1, NOW + 1)
    await raw.script_flush()
    results = await asyncio.gather(
        *(store.append_events(sid, OWNER, 1, [ev(1)], max_len=9) for sid in sessions),
        store.append_events("s0", OWNER, 9, [ev(2)], max_len=9), return_exceptions=True)
    assert results[:-1] == [1] * len(sessions)
    assert isinstance(results[-1], LeaseLost)  # an error after the reload is still its own


async def test_a_hung_server_fails_every_write_within_its_deadline(
        redis_server: RedisServer, untimed: RedisSessionStore) -> None:
    for sid in SIDS[:3]:
        await open_session(untimed, sid)
    redis_server.pause()
    try:
        started = time.monotonic()
        first = [asyncio.ensure_future(untimed.renew(sid, OWNER, 1, NOW)) for sid in SIDS[:3]]
        await asyncio.sleep(0.2)
        # queued behind the hung batch: bounded from its own queueing, not after it
        late = asyncio.ensure_future(untimed.renew("s0", OWNER, 1, NOW))
        results = await asyncio.gather(*first, return_exceptions=True)
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        assert time.monotonic() - started < 0.5 + 0.25
        with pytest.raises(StoreUnavailable, match="did not answer renew"):
            await late
        assert time.monotonic() - started < 0.2 + 0.5 + 0.25
    finally:
        redis_server.resume()
    await untimed.renew("s0", OWNER, 1, NOW + 1)  # recovers once the server runs again


async def test_a_dead_server_fails_batched_writes(
        redis_server: RedisServer, untimed: RedisSessionStore) -> None:
    await open_session(untimed, "s0")
    redis_server.kill()
    with pytest.raises(StoreUnavailable, match="unreachable during append_events"):
        await untimed.append_events("s0", OWNER, 1, [ev(1)], max_len=9)


async def test_durable_writes_without_replica_acks_fail_alone(redis_server: RedisServer) -> None:
    plain = RedisSessionStore(connect(redis_server.url))
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.4), timeout_s=0.4,
                              replica_acks=1)
    try:
        await open_session(plain, "s0")
        await open_session(plain, "s1")  # the scripts loaded: one WAIT, not one per reload
        await plain.renew("s1", OWNER, 1, NOW + 1)
        await plain.append_events("s1", OWNER, 1, [ev(1)], max_len=9)
        renewed, appended = await asyncio.gather(
            store.renew("s0", OWNER, 1, NOW + 1),
            store.append_events("s0", OWNER, 1, [ev(1)], max_len=9), return_exceptions=True)
        assert renewed is None  # a renewal needs no replica
        assert isinstance(appended, StoreUnavailable)
        assert "append_events reached 0 of 1 Redis replica" in str(appended)
    finally:
        await store.close()
        await plain.close()


def test_the_gateways_client_has_no_per_command_timeout() -> None:
    client = connect("redis://127.0.0.1:1/0", timeout_s=0.5, socket_timeouts=False)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] is None
    assert kwargs["socket_connect_timeout"] == 0.5
