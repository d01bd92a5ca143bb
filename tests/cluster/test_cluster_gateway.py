"""Gateways on a real Valkey Cluster: ``--redis-url`` names one node and the gateway
finds the rest. A Realtime client's turn, then an exact resume on a second gateway
after the first dies; a primary SIGKILLed mid-reply, its replica promoted, and the
session going on with nothing lost or duplicated (the checks of tests/faults)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
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
from redis_server import RedisServer
from valkey_cluster import ValkeyCluster

from duplex.store import keys

pytestmark = pytest.mark.slow


async def replica_meta(replica: RedisServer, sid: str) -> dict[str, str]:
    """The session's meta as a replica holds it (READONLY: a replica serves reads of
    its primary's slots on that connection)."""
    r = aioredis.Redis(port=replica.port, decode_responses=True, protocol=2,
                       single_connection_client=True)
    try:
        await r.execute_command("READONLY")
        return dict(await r.hgetall(keys.meta(sid)))
    finally:
        await r.aclose()
LONG = 100  # words of the reply in flight when the primary dies


async def test_a_turn_then_an_exact_resume_on_a_second_gateway(
        valkey_cluster: ValkeyCluster, gateways: GatewayFactory) -> None:
    flags = ("--redis-url", valkey_cluster.url, "--reaper-interval-s", "0.5")
    a = await start(gateways(*flags))
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    sid, token = created["session"]["id"], created["resume_token"]
    await turn_completes(s, turn=1)
    holder = valkey_cluster.primary_of(keys.meta(sid))
    assert (await meta(holder.url, sid))["state"] == "open"
    await assert_journaled(holder.url, sid, s.messages)

    a.kill()  # SIGKILL: B takes the session over once A's heartbeat lapses
    await s.wait_closed()
    b = await start(gateways(*flags))
    cursor = max(seqs(s.messages)) - 3  # the client wants the last few events again
    r, i, resumed = await resume(b.ws, sid, token, cursor)
    assert resumed["attachment_generation"] == 2
    last = resumed["last_server_event_seq"]
    await r.until(lambda m: m.seq == last, f"the replay up to seq {last}", start=i)
    seen = {m.seq: m.raw for m in s.messages if m.seq is not None}
    for m in r.messages:
        if m.seq in seen:
            assert m.raw == seen[m.seq], f"seq {m.seq} replayed differently than sent"
    await turn_completes(r, turn=2)
    first = [m for m in s.messages if m.seq is not None and m.seq <= cursor]
    assert_ordered_exactly_once(first + r.messages)
    m = await meta(valkey_cluster.primary_of(keys.meta(sid)).url, sid)
    assert (m["state"], m["incarnation"]) == ("open", "2")
    await r.close()


async def test_a_primary_killed_mid_reply_fails_over_and_loses_nothing(
        valkey_cluster: ValkeyCluster, gateways: GatewayFactory) -> None:
    # one replica must hold each lease grant and journaled event before it counts
    gw = await start(gateways("--redis-url", valkey_cluster.url, "--redis-replica-acks", "1"))
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    sid = created["session"]["id"]
    await turn_completes(s, turn=1)
    primary = valkey_cluster.primary_of(keys.meta(sid))
    replica = valkey_cluster.replica_of(primary)
    assert (await replica_meta(replica, sid))["state"] == "open"  # WAIT: the replica has it

    before = len(s.messages)
    await s.send("session.update", session={"instructions": f"words={LONG}"})
    await s.speak(1.0)
    i = await s.until_type("response.created", start=before)
    await s.wait(lambda: sum(m.type == "response.output_audio.delta"
                             for m in s.messages[i:]) >= 4, "four reply audio deltas")
    primary.kill()
    await asyncio.to_thread(valkey_cluster.wait_promoted, replica)
    # the promoted replica holds every event the client was sent
    await assert_journaled(replica.url, sid, s.messages)
    # durable writes wait for a replica again once the dead node is back: it rejoins
    # as the new primary's replica (its nodes.conf names the cluster)
    await asyncio.to_thread(valkey_cluster.rejoin, primary)

    await until_heartbeats_acked(s, 30, "a heartbeat journaled on the promoted replica")
    await turn_completes(s, turn=3)
    s.ws.transport.abort()
    await s.wait_closed()
    r, _, resumed = await resume(gw.ws, sid, created["resume_token"], max(seqs(s.messages)))
    assert resumed["recovered"] is False
    await turn_completes(r, turn=4)
    ok = [m for m in s.messages if m.code is None]  # errors carry no seq
    assert_ordered_exactly_once(ok + r.messages)
    assert_errors_unjournaled(store_errors(s.messages))
    await assert_journaled(replica.url, sid, ok + r.messages)
    m = await meta(replica.url, sid)
    assert (m["state"], m["incarnation"]) == ("open", "1")  # never a second owner
    await r.close()
