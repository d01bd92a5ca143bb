"""Redis behind Sentinel: the gateway follows a failover, and durable writes wait
for a replica (DESIGN §8, research/redis.md §6).

Real processes: a primary, replicas and a Sentinel (``tests/redis_server.py``), a
gateway on ``redis+sentinel://``. With one replica acknowledgement required (the
default for Sentinel URLs), every lease grant and journaled event is on a replica
before it counts, so a failover loses nothing a client was told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from client import eventually
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_ordered_exactly_once,
    journal,
    meta,
    resume,
    seqs,
    start,
    turn_completes,
)
from redis_server import ReplicatedRedis


@pytest.fixture
def replicated() -> Iterator[ReplicatedRedis]:
    group = ReplicatedRedis(replicas=2).start()
    try:
        yield group
    finally:
        group.close()


async def test_a_session_survives_the_primary_failing_over(
        replicated: ReplicatedRedis, gateways: GatewayFactory) -> None:
    gw = await start(gateways("--redis-url", replicated.url))
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    sid = created["session"]["id"]
    await turn_completes(s, turn=1)
    for replica in replicated.replicas:  # WAIT: the replicas hold the lease already
        assert (await meta(replica.url, sid))["state"] == "open"

    replicated.primary.kill()
    promoted = await asyncio.to_thread(replicated.wait_failover)
    m = await meta(promoted.url, sid)
    assert (m["state"], m["incarnation"]) == ("open", "1")
    kept = dict(await journal(promoted.url, sid))
    for got in s.messages:  # the new primary holds every event the client was sent
        if got.seq is not None:
            assert kept.get(got.seq) == got.raw, f"seq {got.seq} lost in the failover"

    # the same socket goes on: the gateway finds the new primary by itself
    async def acknowledged() -> bool:
        mark = len(s.messages)
        await s.send("session.heartbeat")
        i = await s.until(lambda m: m.type == "session.heartbeat_ack" or m.code is not None,
                          "a heartbeat's answer", start=mark)
        return s.messages[i].type == "session.heartbeat_ack"

    await eventually(acknowledged, 20, "a heartbeat journaled on the new primary")
    await turn_completes(s, turn=2)
    s.ws.transport.abort()
    await s.wait_closed()
    r, _, resumed = await resume(gw.ws, sid, created["resume_token"], max(seqs(s.messages)))
    assert resumed["recovered"] is False
    await turn_completes(r, turn=3)
    ok = [m for m in s.messages if m.code is None]  # errors carry no seq
    assert_ordered_exactly_once(ok + r.messages)
    await r.close()


async def test_without_a_replica_to_acknowledge_no_lease_is_granted(
        replicated: ReplicatedRedis, gateways: GatewayFactory) -> None:
    gw = await start(gateways("--redis-url", replicated.url, "--store-timeout-s", "1"))
    for replica in replicated.replicas:
        replica.pause()  # SIGSTOP: connected, never acknowledging
    try:
        refused = await Stream.open(gw.ws)
        await refused.until(lambda m: m.code == "store_unavailable", "store_unavailable")
        error = next(m for m in refused.messages if m.code == "store_unavailable").event
        assert "replica" in error["error"]["message"], error
        assert await refused.wait_closed() == 1011
    finally:
        for replica in replicated.replicas:
            replica.resume()
    s = await Stream.open(gw.ws)  # acknowledged again: sessions open
    await s.until_type("session.created")
    await turn_completes(s, turn=1)
    await s.close()
