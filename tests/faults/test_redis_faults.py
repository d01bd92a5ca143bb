"""Redis dies, hangs or is missing under a real gateway with real clients.

The rule under test (docs/architecture.md §3 I4, gateway/session/outbox.py): an event is
journaled before it is sent; when the store cannot journal, the client gets an unjournaled
``error{code: store_unavailable}`` instead, and once the store is back the journal is
the truth again. So a client sees every event or an error in its place, never silence.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
import redis.asyncio as aioredis
from client import eventually, reply_pcm
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_errors_unjournaled,
    assert_journaled,
    assert_losses_explained,
    assert_ordered_exactly_once,
    journal,
    seqs,
    store_errors,
    trace,
    transcript_of,
    turn_completes,
)
from redis_server import RedisServer

from duplex.store import keys
from plugins.tone import decode_turn

LONG = 100  # words of the reply that is streaming when the fault hits (about 21 s)


async def open_streaming(gw_ws: str) -> tuple[Stream, dict, str]:
    """A session whose first reply (LONG words) is streaming audio; its created event and
    the reply's response id."""
    s = await Stream.open(gw_ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    await s.send("session.update", session={"instructions": f"words={LONG}"})
    await s.speak(1.0)
    i = await s.until_type("response.created")
    response_id = s.messages[i].event["response"]["id"]
    await s.wait(lambda: sum(m.type == "response.output_audio.delta" for m in s.messages) >= 3,
                 "three reply audio deltas")
    return s, created, response_id


async def test_redis_killed_and_restarted_mid_reply(aof_redis: RedisServer,
                                                    gateways: GatewayFactory) -> None:
    gw = gateways("--redis-url", aof_redis.url).start()
    s, created, response_id = await open_streaming(gw.ws)
    sid = created["session"]["id"]
    loop = asyncio.get_running_loop()

    aof_redis.kill()
    killed_at, from_kill = loop.time(), len(s.messages)
    # the reply keeps coming; what cannot be journaled comes as errors instead
    await s.wait(lambda: len(store_errors(s.messages[from_kill:])) >= 3,
                 "three store_unavailable errors while Redis is down", timeout=5)
    await asyncio.to_thread(aof_redis.start)  # same port, dir and AOF
    restarted_at = loop.time()
    first_after = await s.until(lambda m: m.seq is not None and m.t > restarted_at,
                                "a journaled event after the restart", timeout=5)
    first_error = store_errors(s.messages[from_kill:])[0]
    assert first_error.t - killed_at < 2.0

    # no silence without explanation: while Redis was down something arrived steadily
    during = [killed_at] + [m.t for m in s.messages[from_kill:first_after + 1]]
    gap = max(b - a for a, b in itertools.pairwise(during))
    assert gap < 1.0, f"the client heard nothing for {gap:.2f} s during the outage"

    # the session goes on: a new turn barges in on the long reply and completes
    await turn_completes(s, turn=2)
    errors = store_errors(s.messages)
    assert_errors_unjournaled(errors)
    assert all(killed_at <= m.t <= s.messages[first_after].t for m in errors)
    assert_ordered_exactly_once(s.messages)
    assert seqs(s.messages)[0] == 1
    lost = assert_losses_explained(s.messages, response_id, turn=1, words=LONG)
    assert lost > 0  # the outage did cost words: replaced by errors, not dropped silently

    # a resume from an early cursor replays exactly the journal
    cursor = 1
    seen = {m.seq: m.raw for m in s.messages if m.seq is not None}
    r = await Stream.open(f"{gw.ws}?resume={sid}")
    await r.send("session.resume", resume_token=created["resume_token"],
                 last_received_server_event_seq=cursor)
    i = await r.until(lambda m: m.type == "session.resumed" or m.type == "error",
                      "session.resumed")
    resumed = r.messages[i].event
    assert resumed["type"] == "session.resumed", resumed
    last = resumed["last_server_event_seq"]
    assert last >= max(seen)
    await r.until(lambda m: m.seq == last, f"the replay up to seq {last}", start=i)
    replay = [m for m in r.messages[i + 1:] if m.seq is not None and m.seq <= last]
    assert [m.seq for m in replay] == list(range(cursor + 1, last + 1))
    assert not [m for m in r.messages[i + 1:] if m.type == "error"]
    for m in replay:
        if m.seq in seen:
            assert m.raw == seen[m.seq], f"replayed seq {m.seq} differs from what was sent"
    stored = await journal(aof_redis.url, sid, after=cursor)
    assert [(m.seq, m.raw) for m in replay] == [e for e in stored if e[0] <= last]
    # the first socket was told it was replaced
    assert await s.wait_closed() == 4000
    assert s.messages[-1].type == "session.replaced"
    await r.close()


async def test_redis_paused_errors_fast_and_recovers(redis_server: RedisServer,
                                                     gateways: GatewayFactory) -> None:
    gw = gateways("--redis-url", redis_server.url, "--store-timeout-s", "0.5").start()
    s, _, response_id = await open_streaming(gw.ws)
    loop = asyncio.get_running_loop()
    pause_s = 3.0

    redis_server.pause()
    paused_at, from_pause = loop.time(), len(s.messages)
    try:
        first = await s.until(lambda m: m.code == "store_unavailable",
                              "a store_unavailable error during the pause", start=from_pause,
                              timeout=pause_s)
        first_error_s = s.messages[first].t - paused_at

        # a new connection is refused with a clear reason, not left hanging
        t0 = loop.time()
        second = await Stream.open(gw.ws)
        close_code = await second.wait_closed(timeout=pause_s)
        refused_s = loop.time() - t0
        [refusal] = [m.event for m in second.messages]
        assert refusal["type"] == "error", refusal
        assert refusal["error"]["code"] in ("not_ready", "store_unavailable"), refusal
        message = refusal["error"]["message"].lower()
        assert "store" in message or "redis" in message, refusal

        # the event loop is not stuck behind Redis: /healthz answers at once, throughout
        health: list[float] = []
        async with httpx.AsyncClient(base_url=gw.http, timeout=2.0) as http:
            while loop.time() < paused_at + pause_s:
                t1 = time.monotonic()
                response = await http.get("/healthz")
                health.append(time.monotonic() - t1)
                assert response.status_code == 200
                await asyncio.sleep(0.1)  # probe pacing, not synchronisation
    finally:
        redis_server.resume()
    resumed_at = loop.time()

    assert first_error_s < 2.0, f"first store_unavailable {first_error_s:.2f} s after the pause"
    assert close_code in (1011, 1013), close_code
    assert refused_s < 2.0, f"the second connection was refused after {refused_s:.2f} s"
    assert len(health) >= 5 and max(health) < 0.5, health

    # after SIGCONT the session works again
    await s.until(lambda m: m.seq is not None and m.t > resumed_at,
                  "a journaled event after the resume", timeout=5)
    await turn_completes(s, turn=2)
    errors = store_errors(s.messages)
    assert len(errors) >= 2
    assert_errors_unjournaled(errors)
    assert_ordered_exactly_once(s.messages)
    assert_losses_explained(s.messages, response_id, turn=1, words=LONG)
    await s.close()


async def test_redis_unreachable_at_start(gateways: GatewayFactory) -> None:
    later = RedisServer()  # its port is free: nothing listens there yet
    try:
        gw = gateways("--redis-url", later.url).start(wait_ready=False)
        assert gw.proc is not None and gw.proc.poll() is None  # it keeps running

        async def said_why() -> bool:
            return f"Redis at {later.url} is unreachable" in "".join(gw.output)

        # the deadlines here bound a failing run only: a gateway still importing on a
        # busy box may take long to say it
        await eventually(said_why, 60, "the log says Redis is unreachable")

        async with httpx.AsyncClient(base_url=gw.http, timeout=5.0) as http:
            # not ready all along; the reason names the store once the plugin's
            # stages are up (a busy box may still be starting them: "stage listen
            # starting" comes first)
            async def blames_the_store() -> bool:
                response = await http.get("/readyz")
                assert response.status_code == 503, response.text
                body = response.json()
                assert body["ready"] is False
                return "store" in body["reason"]

            await eventually(blames_the_store, 60, "/readyz names the store")

            s = await Stream.open(gw.ws)
            assert await s.wait_closed() == 1013
            [refusal] = [m.event for m in s.messages]
            assert refusal["type"] == "error"
            assert refusal["error"]["code"] == "not_ready", refusal
            message = refusal["error"]["message"].lower()
            assert "store" in message or "redis" in message, refusal

            await asyncio.to_thread(later.start)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60.0
            while (response := await http.get("/readyz")).status_code != 200:
                assert loop.time() < deadline, f"still not ready: {response.text}"
                await asyncio.sleep(0.05)
            assert response.json()["ready"] is True

        # and sessions open now
        s = await Stream.open(gw.ws)
        await s.until_type("session.created")
        await s.close()
    finally:
        later.close()


async def test_turn_spoken_while_redis_is_down_leaves_the_session_usable(
        aof_redis: RedisServer, gateways: GatewayFactory) -> None:
    gw = gateways("--redis-url", aof_redis.url).start()
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    await s.send("session.update", session={"instructions": "words=3"})
    await s.until_type("session.updated")

    aof_redis.kill()
    await s.speak(1.0)  # the user talks on; server VAD commits the turn meanwhile
    # three refusals: speech_started, the commit's events, then saving the user item
    await s.wait(lambda: len(store_errors(s.messages)) >= 3,
                 "the turn's store_unavailable errors", timeout=5)
    await asyncio.to_thread(aof_redis.start)

    # once Redis is back, the next turn is answered (not refused, not ignored)
    start_at = len(s.messages)
    await s.speak(1.0)
    i = await s.until(lambda m: (m.type == "response.done"
                                 and m.event["response"]["status"] == "completed")
                      or (m.type == "error" and m.code != "store_unavailable"),
                      "a completed reply or an error", start=start_at, timeout=15)
    done = s.messages[i].event
    assert done["type"] == "response.done", f"{done}; messages: {trace(s.messages)}"
    text = transcript_of(done)
    assert text.startswith("answer to turn "), text
    turn = int(text.split()[3].rstrip(":"))
    audio = reply_pcm([m.event for m in s.messages], done["response"]["id"])
    assert decode_turn(audio[:4800], 24000) == turn % 16
    assert_errors_unjournaled(store_errors(s.messages))
    assert_ordered_exactly_once(s.messages)
    await s.close()


async def test_redis_restarted_empty_tells_the_client(redis_server: RedisServer,
                                                      gateways: GatewayFactory) -> None:
    gw = gateways("--redis-url", redis_server.url).start()
    s, _, _ = await open_streaming(gw.ws)
    redis_server.kill()
    await s.wait(lambda: len(store_errors(s.messages)) >= 1,
                 "a store_unavailable error while Redis is down", timeout=5)
    await asyncio.to_thread(redis_server.start)  # no AOF: back, but the session is gone
    from_restart = len(s.messages)

    # the client must be told, not left waiting on an open, silent socket
    code = await s.wait_closed(timeout=5)
    told = [m for m in s.messages[from_restart:]
            if m.type == "error" and m.code != "store_unavailable"]
    assert told, trace(s.messages[from_restart:])
    assert code is not None and code != 1006, code


# What a failover to a replica that missed the newest writes leaves behind: the
# journal and its last_seq as they were ARGV[1] events ago. The stream is rebuilt
# (XDEL would keep its last ID); one script, so no append lands in between.
_ROLL_BACK = """
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq'))
local keep = last - tonumber(ARGV[1])
local entries = redis.call('XRANGE', KEYS[2], '-', keep .. '-1')
redis.call('DEL', KEYS[2])
for _, e in ipairs(entries) do redis.call('XADD', KEYS[2], e[1], unpack(e[2])) end
redis.call('HSET', KEYS[1], 'last_seq', keep)
return {keep, last}
"""


async def test_journaled_events_redis_took_back_are_journaled_again(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    """Redis can lose acknowledged writes (a failover to a replica that had not got
    them). The journal still holds its last seconds of events: the next append finds
    the journal behind and writes them again, byte for byte, and the reply goes on."""
    gw = gateways("--redis-url", redis_server.url).start()
    s, created, response_id = await open_streaming(gw.ws)
    sid = created["session"]["id"]
    r = aioredis.from_url(redis_server.url, decode_responses=True, protocol=2)
    try:
        keep, last = await r.eval(_ROLL_BACK, 2, keys.meta(sid),
                                  keys.journal(sid), 3)
    finally:
        await r.aclose()
    assert (keep, last) == (last - 3, last) and max(seqs(s.messages)) >= last

    i = await s.until(lambda m: m.type == "response.done", "the reply's end", timeout=40)
    assert s.messages[i].event["response"]["id"] == response_id
    assert s.messages[i].event["response"]["status"] == "completed"
    assert not [m for m in s.messages if m.type == "error"], trace(s.messages)
    assert_ordered_exactly_once(s.messages)
    await assert_journaled(redis_server.url, sid, s.messages)
    assert await gw.metric("duplex_journal_repairs_total") == 1
    await s.close()
