"""Redis behind Sentinel: the gateway follows a failover, and durable writes wait
for a replica (docs/architecture.md §8, research/redis.md §6).

Real processes: a primary, replicas and a Sentinel (``tests/redis_server.py``), a
gateway on ``redis+sentinel://``. With one replica acknowledgement required (the
default for Sentinel URLs), every lease grant and journaled event is on a replica
before it counts, so a failover loses nothing a client was told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_errors_unjournaled,
    assert_journaled,
    assert_ordered_exactly_once,
    meta,
    resume,
    seqs,
    start,
    store_errors,
    turn_completes,
    until_heartbeats_acked,
)
from redis_server import ReplicatedRedis


@pytest.fixture
def replicated() -> Iterator[ReplicatedRedis]:
    group = ReplicatedRedis(replicas=2).start()
    try:
        yield group
    finally:
        group.print_logs()
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
    # the new primary holds every event the client was sent
    await assert_journaled(promoted.url, sid, s.messages)

    # the same socket goes on: the gateway finds the new primary by itself
    await until_heartbeats_acked(s, 20, "a heartbeat journaled on the new primary")
    await turn_completes(s, turn=2)
    s.ws.transport.abort()
    await s.wait_closed()
    r, _, resumed = await resume(gw.ws, sid, created["resume_token"], max(seqs(s.messages)))
    assert resumed["recovered"] is False
    await turn_completes(r, turn=3)
    ok = [m for m in s.messages if m.code is None]  # errors carry no seq
    assert_ordered_exactly_once(ok + r.messages)
    await r.close()


async def test_the_gateway_leaves_a_deposed_primary_before_sentinel_demotes_it(
        replicated: ReplicatedRedis, gateways: GatewayFactory) -> None:
    """A failover with the old primary still up: it takes writes, unreplicated, until
    Sentinel demotes it ~10 s later. The first short WAIT sends the gateway to the
    primary Sentinel names now, so the next turn is served within a retry."""
    gw = await start(gateways("--redis-url", replicated.url))
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    await turn_completes(s, turn=1)  # nothing journaled while the failover runs
    deposed = replicated.primary
    promoted = await asyncio.to_thread(replicated.force_failover)

    await turn_completes(s, turn=2)
    assert replicated.role(deposed) == "master", "Sentinel demoted it first: nothing tested"
    # the new primary holds every event the client was sent
    await assert_journaled(promoted.url, sid, s.messages)
    assert_ordered_exactly_once([m for m in s.messages if m.code is None])
    await s.close()


async def test_events_short_of_a_replica_reach_the_client_once_a_replica_has_them(
        replicated: ReplicatedRedis, gateways: GatewayFactory) -> None:
    """An append whose WAIT fell short is on the primary alone. The outbox's next
    publish reconciles with the journal: it must not send those events until a
    replica holds them, or a failover would take back what the client was told."""
    gw = await start(gateways("--redis-url", replicated.url, "--store-timeout-s", "1"))
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    await turn_completes(s, turn=1)
    mark = len(s.messages)  # a journaled answer: everything published before it is here
    await s.send("session.heartbeat")
    await s.until(lambda m: m.type == "session.heartbeat_ack", "a heartbeat's answer", start=mark)
    told = max(seqs(s.messages))
    for replica in replicated.replicas:
        replica.pause()  # SIGSTOP: connected, never acknowledging
    try:
        mark = len(s.messages)
        await s.send("session.update", session={"instructions": "words=4"})
        await s.speak(1.0)
        # the first refused publish appended on the primary; later ones reconciled first
        await s.wait(lambda: len(store_errors(s.messages[mark:])) >= 3, "three refused publishes")
        assert max(seqs(s.messages)) == told, "sent events that no replica holds"
        assert_errors_unjournaled(store_errors(s.messages[mark:]))
    finally:
        for replica in replicated.replicas:
            replica.resume()
    await turn_completes(s, turn=3)
    assert max(seqs(s.messages)) > told
    ok = [m for m in s.messages if m.code is None]
    assert_ordered_exactly_once(ok)  # what landed unacknowledged came late, not never
    for replica in replicated.replicas:
        await assert_journaled(replica.url, sid, ok)
    await s.close()


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
