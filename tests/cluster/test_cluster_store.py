"""The store on a real Valkey Cluster: every script in one slot, sessions spread
over the primaries, admission exact store-wide, the reaper over every bucket, and
a slot moved under a live session (MOVED)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from valkey_cluster import ValkeyCluster

from duplex import lease
from duplex.errors import CapacityError
from duplex.store import RedisSessionStore, connect, keys

NOW = 1_700_000_000.0
OWNER = "gw-a"
EXPIRED = json.dumps({"type": "session.expired", "event_id": "event_x",
                      "reason": lease.ExpiryReason.IDLE_TTL.value, "server_event_seq": 0},
                     separators=(",", ":"))


@pytest.fixture
async def store(valkey_cluster: ValkeyCluster) -> AsyncIterator[RedisSessionStore]:
    s = RedisSessionStore(connect(valkey_cluster.url))
    await s.ping()  # finds the cluster, as the gateway's first ping does
    try:
        yield s
    finally:
        await s.close()


async def opened(store: RedisSessionStore, sid: str, *, max_sessions: int = 10_000,
                 idle_ttl_s: float | None = 60.0) -> None:
    await store.open_session(sid, owner=OWNER, token_digest="d", config="{}", now=NOW,
                             max_sessions=max_sessions, max_sessions_per_owner=0,
                             idle_ttl_s=idle_ttl_s, grace_s=30.0)


async def test_sessions_spread_over_every_primary(valkey_cluster: ValkeyCluster,
                                                  store: RedisSessionStore) -> None:
    sids = [f"spread-{n}" for n in range(30)]
    for sid in sids:
        await opened(store, sid)
        await store.append_events(sid, OWNER, 1, [(1, "a"), (2, "b")], max_len=100)
    holders = {valkey_cluster.primary_of(keys.meta(sid)).port for sid in sids}
    assert holders == {p.port for p in valkey_cluster.primaries}
    for sid in sids:
        assert await store.read_journal(sid, 0) == [(1, "a"), (2, "b")]
        assert await store.close_session(sid, OWNER, 1)
    assert not set(sids) & set(await store.list_owned(OWNER))


async def test_admission_is_exact_across_the_cluster(store: RedisSessionStore,
                                                     raw: RedisCluster) -> None:
    held = len(await raw.hkeys(keys.ADMITTED))
    results = await asyncio.gather(
        *(opened(store, f"admit-{n}", max_sessions=held + 4) for n in range(12)),
        return_exceptions=True)
    assert sum(r is None for r in results) == 4
    assert all(isinstance(r, CapacityError) for r in results if r is not None)
    for n, result in enumerate(results):
        if result is None:
            assert await store.close_session(f"admit-{n}", OWNER, 1)


async def test_the_reaper_claims_overdue_sessions_on_every_primary(
        store: RedisSessionStore) -> None:
    sids = {f"idle-{n}" for n in range(20)}
    for sid in sids:
        await opened(store, sid, idle_ttl_s=1.0)
    claimed = await store.claim_expired(OWNER, NOW + 2, limit=100)
    assert {sid for sid, _, _ in claimed} >= sids
    assert await store.claim_expired(OWNER, NOW + 2, limit=100) == []  # each once
    for sid in sids:
        assert await store.finish_expiry(sid, OWNER, EXPIRED) == 1
        assert (await store.get(sid) or pytest.fail(sid)).state == "expired"
    assert not sids & set(await store.list_owned(OWNER))


def _move_slot(cluster: ValkeyCluster, key: str) -> None:
    """Migrate ``key``'s slot, keys and all, to another primary (as a resharding)."""
    source = cluster.primary_of(key)
    target = next(p for p in cluster.primaries if p.port != source.port)
    src = redis.Redis(port=source.port, decode_responses=True)
    dst = redis.Redis(port=target.port, decode_responses=True)
    try:
        slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
        src_id, dst_id = cluster.node_id(source), cluster.node_id(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moving = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if moving:
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000,
                                "KEYS", *moving)
        for node in (dst, src):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    finally:
        src.close()
        dst.close()


async def test_a_live_session_follows_its_slot_to_another_primary(
        valkey_cluster: ValkeyCluster, store: RedisSessionStore) -> None:
    await opened(store, "moving")
    await store.append_events("moving", OWNER, 1, [(1, "a")], max_len=100)
    before = valkey_cluster.primary_of(keys.meta("moving")).port
    _move_slot(valkey_cluster, keys.meta("moving"))
    assert valkey_cluster.primary_of(keys.meta("moving")).port != before
    # the batcher's pipeline meets MOVED, asks for the slots again and sends it on
    assert await store.append_events("moving", OWNER, 1, [(2, "b")], max_len=100) == 2
    assert await store.read_journal("moving", 0) == [(1, "a"), (2, "b")]
    assert await store.close_session("moving", OWNER, 1)
