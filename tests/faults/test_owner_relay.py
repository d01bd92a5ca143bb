"""A resume that reaches another live process is served through the session's owner.

docs/architecture.md §8: two gateways share one Redis. A client that drops its socket
on A and resumes on B (a load balancer's choice) is relayed to A frame for frame: no takeover
(incarnation stays 1), the reply in flight goes on to the end, every event arrives
exactly once and in order, and close codes pass through (1000 still ends the
session). When A dies under the relay the client gets 1012, and its next resume on B
takes the session over.
"""

from __future__ import annotations

import asyncio
import random

import redis.asyncio as aioredis
from client import detached, eventually
from disconnects import Churn
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_ordered_exactly_once,
    meta,
    resume,
    seqs,
    start,
    transcript_of,
    turn_completes,
)
from gateway_process import GatewayProcess
from redis_server import RedisServer

LONG = 40  # words of the reply in flight while the client moves
REAPER = "0.5"  # owner heartbeat period: a dead owner is presumed dead after 1.5 s


async def opened_with_a_reply_in_flight(a: GatewayProcess) -> tuple[Stream, dict, str]:
    """A session on ``a`` that has streamed a few words of a long reply."""
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    await s.send("session.update", session={"instructions": f"words={LONG}"})
    await s.speak(1.0)
    i = await s.until_type("response.created")
    await s.wait(lambda: sum(m.type == "response.output_audio.delta"
                             for m in s.messages) >= 4, "four reply audio deltas")
    return s, created, s.messages[i].event["response"]["id"]


async def test_a_resume_on_another_process_is_relayed_to_the_live_owner(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    flags = ("--redis-url", redis_server.url, "--reaper-interval-s", REAPER)
    a = gateways(*flags).start()
    b = await start(gateways(*flags))
    owner_a = await a.owner()
    s, created, in_flight = await opened_with_a_reply_in_flight(a)
    sid, token = created["session"]["id"], created["resume_token"]
    s.ws.transport.abort()  # the client's network drops mid-reply
    await s.wait_closed()
    cursor = max(seqs(s.messages)) - 2  # it wants the last two again

    r, i, resumed = await resume(b.ws, sid, token, cursor)
    assert resumed["attachment_generation"] == 2
    assert resumed["recovered"] is False  # nothing lost: the owner kept the session
    done_at = await r.until(lambda m: m.type == "response.done", "the reply's end", start=i)
    done = r.messages[done_at].event
    assert done["response"]["id"] == in_flight
    assert done["response"]["status"] == "completed"
    assert len(transcript_of(done).split()) == 4 + LONG
    assert seqs(r.messages)[0] == cursor + 1
    m = await meta(redis_server.url, sid)
    assert (m["owner"], m["incarnation"], m["generation"]) == (owner_a, "1", "2")
    assert await b.metric("duplex_resumes_relayed_total") == 1
    assert await a.metric("duplex_sessions_resumed_total") == 1

    await turn_completes(r, turn=2)  # the conversation goes on through the relay
    assert_ordered_exactly_once(r.messages)

    # a wrong token is refused by the owner, and the refusal passes back unchanged
    bad = await Stream.open(f"{b.ws}?resume={sid}")
    await bad.send("session.resume", resume_token="x" * 43,
                   last_received_server_event_seq=0)
    await bad.until(lambda m: m.code == "session_resume_expired", "session_resume_expired")
    assert await bad.wait_closed() == 1008

    await r.close()  # 1000 through the relay: the owner ends the session

    async def closed() -> bool:
        return (await meta(redis_server.url, sid))["state"] == "closed"

    await eventually(closed, 5, "the owner closed the session")


async def relayed_session(redis_server: RedisServer, gateways: GatewayFactory, *,
                          turns: int) -> tuple[GatewayProcess, GatewayProcess, Stream, Stream,
                                               dict]:
    """Gateways A and B on one Redis; a session opened on A (``turns`` turns spoken),
    dropped, and resumed through B: (a, b, the first socket, the relayed one,
    session.resumed)."""
    flags = ("--redis-url", redis_server.url, "--reaper-interval-s", REAPER)
    a = gateways(*flags).start()
    b = await start(gateways(*flags))
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    for turn in range(1, turns + 1):
        await turn_completes(s, turn=turn)
    s.ws.transport.abort()
    await s.wait_closed()
    r, _, resumed = await resume(b.ws, created["session"]["id"], created["resume_token"],
                                 max(seqs(s.messages)))
    return a, b, s, r, resumed


async def test_when_the_owner_dies_under_a_relay_the_next_resume_takes_over(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    a, b, s, r, resumed = await relayed_session(redis_server, gateways, turns=1)
    sid = resumed["session"]["id"]
    start_at = len(r.messages)
    await r.send("session.update", session={"instructions": f"words={LONG}"})
    await r.speak(1.0)
    i = await r.until_type("response.created", start=start_at)
    in_flight = r.messages[i].event["response"]["id"]
    await r.until_type("response.output_audio.delta", start=i)

    a.kill()
    assert await r.wait_closed() == 1012  # "service restart": resume again
    cursor = max(seqs(r.messages))
    again, _, taken = await resume(b.ws, sid, resumed["resume_token"], cursor)
    assert taken["recovered"] is True
    assert taken["lost_response_id"] == in_flight
    assert taken["attachment_generation"] == 3
    m = await meta(redis_server.url, sid)
    assert (m["owner"], m["incarnation"]) == (await b.owner(), "2")
    await turn_completes(again, turn=3)
    assert_ordered_exactly_once(s.messages + r.messages + again.messages)
    await again.close()


async def test_a_relaying_process_that_stops_leaves_the_session_detached_at_its_owner(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    a, b, s, r, resumed = await relayed_session(redis_server, gateways, turns=0)
    sid = resumed["session"]["id"]
    await turn_completes(r, turn=1)

    await asyncio.to_thread(b.stop)  # SIGTERM to the relaying process only
    assert await r.wait_closed() == 1012  # "service restart": resume again

    raw = aioredis.from_url(redis_server.url, decode_responses=True, protocol=2)
    try:
        m = await detached(raw, sid)  # the owner saw the relayed socket go
    finally:
        await raw.aclose()
    assert (m["state"], m["owner"]) == ("open", await a.owner())
    again, _, _ = await resume(a.ws, sid, resumed["resume_token"], max(seqs(r.messages)))
    await turn_completes(again, turn=2)
    assert_ordered_exactly_once(s.messages + r.messages + again.messages)
    await again.close()


async def test_thirty_resumes_on_random_processes_lose_and_duplicate_nothing(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    """The promise end to end: a long reply streams while the client drops and
    resumes 30 times, each time on whichever of three gateways the dice pick; every
    event arrives exactly once, in order, and the owner never changes."""
    flags = ("--redis-url", redis_server.url, "--output-lead-ms", "40000")
    three = [gateways(*flags).start(), await start(gateways(*flags)),
             await start(gateways(*flags))]
    rng = random.Random(20261129)
    landed: list[int] = []

    def pick() -> str:
        landed.append(rng.randrange(3))
        return three[landed[-1]].ws

    churn = await Churn.start(three[0].ws)
    await churn.cycles(30, rng, pick)
    await churn.finish_and_check()
    m = await meta(redis_server.url, churn.sid)
    assert (m["owner"], m["incarnation"]) == (await three[0].owner(), "1")
    # every resume was served by the owner; those that landed elsewhere, relayed there
    assert await three[0].metric("duplex_sessions_resumed_total") == 30
    for i in (1, 2):
        assert await three[i].metric("duplex_resumes_relayed_total") == landed.count(i)
    assert landed.count(0) < 30  # the dice did send some elsewhere
    await churn.client.close()
