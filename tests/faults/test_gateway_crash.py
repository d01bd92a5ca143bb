"""A gateway dies (SIGKILL) or stops (SIGTERM) under a live session; another takes over.

docs/architecture.md §3 I3/I4 and §4: the session lives in Redis, so a second gateway
on the same Redis takes it over (incarnation+1), replays the journal from the client's cursor,
closes the reply the dead process was generating with
``response.done{status: failed, reason: server_restarted}``, and the conversation goes on.
"""

from __future__ import annotations

import asyncio
import base64
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import redis.asyncio as aioredis
from client import silence, tone
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_ordered_exactly_once,
    journal,
    resume,
    seqs,
    start,
    transcript_of,
    turn_completes,
)
from redis_server import RedisServer

from duplex.store import keys
from gateway.audio import resample, ulaw_decode, ulaw_encode
from plugins.tone import decode_turn

LONG = 100  # words of the reply in flight when the gateway dies
REAPER = "0.5"  # owner heartbeat period: a dead owner is presumed dead after 1.5 s


@pytest.mark.parametrize("store", ["redis-url", "embedded"])
async def test_gateway_killed_mid_reply_is_taken_over(
        store: str, aof_redis: RedisServer, gateways: GatewayFactory,
        data_dir: Path) -> None:
    if store == "redis-url":
        flags: tuple[str, ...] = ("--redis-url", aof_redis.url)
        redis_url = aof_redis.url
    else:  # no --redis-url: each gateway starts the embedded Valkey on the same data dir
        flags = ()
        redis_url = f"unix://{data_dir / 'valkey' / 'valkey.sock'}"
    a = gateways(*flags, "--reaper-interval-s", REAPER, data_dir=data_dir).start()

    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    sid, token = created["session"]["id"], created["resume_token"]
    await s.send("session.update", session={"instructions": f"words={LONG}"})
    await s.speak(1.0)
    i = await s.until_type("response.created")
    in_flight = s.messages[i].event["response"]["id"]
    await s.wait(lambda: sum(m.type == "response.output_audio.delta" for m in s.messages) >= 4,
                 "four reply audio deltas")

    a.kill()  # SIGKILL: no detach, no goodbye; an embedded Valkey flushes its AOF and dies
    await s.wait_closed()
    assert s.close_code == 1006
    assert_ordered_exactly_once(s.messages)
    seen = {m.seq: m.raw for m in s.messages if m.seq is not None}
    cursor = max(seen) - 5  # the client missed (or wants again) the last few events

    b = await start(gateways(*flags, "--reaper-interval-s", REAPER, data_dir=data_dir))
    r, i, resumed = await resume(b.ws, sid, token, cursor)
    assert resumed["recovered"] is True
    assert resumed["lost_response_id"] == in_flight
    assert resumed["attachment_generation"] == 2
    last = resumed["last_server_event_seq"]
    assert resumed["replay_count"] == last - cursor

    # the replay is exactly the journal after the cursor, then the lost reply's end
    await r.until(lambda m: m.seq == last, f"the replay up to seq {last}", start=i)
    replay = r.messages[i + 1:]
    replay = replay[:next(k for k, m in enumerate(replay) if m.seq == last) + 1]
    assert [m.seq for m in replay] == list(range(cursor + 1, last + 1))
    stored = await journal(redis_url, sid, after=cursor)
    assert [(m.seq, m.raw) for m in replay] == stored[:len(replay)]
    for m in replay:
        if m.seq in seen:
            assert m.raw == seen[m.seq], f"seq {m.seq} replayed differently than sent"
    done = replay[-1].event
    assert done["type"] == "response.done", done
    assert done["response"]["id"] == in_flight
    assert done["response"]["status"] == "failed"
    assert done["response"]["status_details"]["reason"] == "server_restarted"
    assert max(seen) < last  # nothing of A's reply came after its failure
    assert not [m for m in replay[:-1] if m.type == "response.done"]

    # the conversation goes on: the next spoken turn is answered as turn 2
    await turn_completes(r, turn=2)
    assert_ordered_exactly_once(r.messages)
    await r.close()


@pytest.mark.parametrize("moment", ["between-turns", "mid-reply"])
async def test_sigterm_hands_sessions_over_at_once(moment: str, redis_server: RedisServer,
                                                   gateways: GatewayFactory) -> None:
    # A long heartbeat: were B to wait for A's heartbeat to lapse, it would wait 15 s.
    slow = ("--redis-url", redis_server.url, "--reaper-interval-s", "5")
    a = gateways(*slow).start()
    owner_a = await a.owner()

    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    sid = created["session"]["id"]
    await turn_completes(s, turn=1, words=3)
    in_flight = None
    if moment == "mid-reply":
        before = len(s.messages)
        await s.send("session.update", session={"instructions": f"words={LONG}"})
        await s.speak(1.0)
        i = await s.until_type("response.created", start=before)
        in_flight = s.messages[i].event["response"]["id"]
        await s.until_type("response.output_audio.delta", start=i)

    await asyncio.to_thread(a.stop)  # SIGTERM
    # a clean stop; uvicorn re-raises the SIGTERM it handled once it has shut down
    assert a.proc is not None and a.proc.returncode in (0, -signal.SIGTERM)
    assert any("Application shutdown complete" in line for line in a.output), a.output[-10:]
    assert await s.wait_closed() == 1012  # "service restart": resume elsewhere
    raw = aioredis.from_url(redis_server.url, decode_responses=True, protocol=2)
    try:
        assert await raw.zscore(keys.OWNERS, owner_a) is None  # A retired its owner id
        meta = await raw.hgetall(keys.meta(sid))
        assert meta["state"] == "open" and meta["owner"] == owner_a
        assert meta["detached_at"] != "", meta  # detached: its grace is running
    finally:
        await raw.aclose()
    seen = {m.seq: m.raw for m in s.messages if m.seq is not None}

    b = await start(gateways(*slow))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    r, i, resumed = await resume(b.ws, sid, created["resume_token"], max(seen))
    took_s = loop.time() - t0
    assert took_s < 3.0, f"takeover waited {took_s:.1f} s (for A's heartbeat to lapse?)"
    assert resumed["lost_response_id"] == in_flight
    last = resumed["last_server_event_seq"]
    assert resumed["replay_count"] == last - max(seen)
    if in_flight is None:
        assert last == max(seen)  # nothing was generated after the client's last event
    else:
        # what A journaled after the socket closed, then the end of the lost reply
        await r.until(lambda m: m.seq == last, f"the replay up to seq {last}", start=i)
        replay = [m for m in r.messages[i + 1:] if m.seq is not None and m.seq <= last]
        stored = await journal(redis_server.url, sid, after=max(seen))
        assert [(m.seq, m.raw) for m in replay] == stored[:len(replay)]
        done = replay[-1].event
        assert done["type"] == "response.done" and done["response"]["id"] == in_flight
        assert done["response"]["status"] == "failed"
        assert done["response"]["status_details"]["reason"] == "server_restarted"
    await turn_completes(r, turn=2 if in_flight is None else 3)
    assert_ordered_exactly_once(s.messages + r.messages)
    await r.close()


async def test_the_negotiated_audio_format_survives_a_takeover(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    """R21: the session's μ-law formats come back with it from Redis, so the first
    append after a takeover is heard as 8 kHz μ-law (not PCM16) and the reply is μ-law."""
    flags = ("--redis-url", redis_server.url, "--reaper-interval-s", REAPER)
    a = gateways(*flags).start()
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    await s.send("session.update", session={"audio": {
        "input": {"format": {"type": "audio/pcmu"}},
        "output": {"format": {"type": "audio/pcmu"}}}})
    await s.until_type("session.updated")
    a.kill()
    await s.wait_closed()

    b = await start(gateways(*flags))
    r, i, resumed = await resume(b.ws, created["session"]["id"], created["resume_token"],
                                 max(seqs(s.messages)))
    assert resumed["recovered"] is True
    audio = b"".join(ulaw_encode(resample(pcm, 24000, 8000)).tobytes()
                     for pcm in (tone(1.0), silence(0.8)))
    for at in range(0, len(audio), 160):  # 20 ms of 8 kHz μ-law, with no format given
        await r.send("input_audio_buffer.append",
                     audio=base64.b64encode(audio[at:at + 160]).decode())
    j = await r.until(lambda m: m.type == "response.done", "the reply", start=i)
    done = r.messages[j].event
    assert done["response"]["status"] == "completed"
    heard = next(m.event for m in r.messages if m.type ==
                 "conversation.item.input_audio_transcription.completed")
    speech_ms = int(re.search(r"(\d+) ms of speech", heard["transcript"])[1])
    assert 900 <= speech_ms <= 1100  # 8 kHz as 8 kHz: not a third or three times it
    deltas = [base64.b64decode(m.event["delta"]) for m in r.messages
              if m.type == "response.output_audio.delta"
              and m.event["response_id"] == done["response"]["id"]]
    pcm = ulaw_decode(np.frombuffer(b"".join(deltas), dtype=np.uint8))
    assert decode_turn(pcm[:1600], 8000) == 1  # μ-law at 8 kHz out, answering turn 1
    await r.close()


async def test_a_function_call_survives_a_takeover(redis_server: RedisServer,
                                                   gateways: GatewayFactory) -> None:
    """The call, the session's tools and tool choice live in Redis: after the
    gateway that made the call dies, the client resumes on another, answers the
    call there, and the reply uses the answer."""
    flags = ("--redis-url", redis_server.url, "--reaper-interval-s", REAPER)
    a = gateways(*flags).start()
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    tool = {"type": "function", "name": "get_time", "parameters": {"type": "object"}}
    await s.send("session.update", session={"tools": [tool], "tool_choice": "required"})
    await s.until_type("session.updated")
    await s.send("response.create")
    i = await s.until_type("response.done")
    call = s.messages[i].event["response"]["output"][0]
    assert (call["type"], call["name"]) == ("function_call", "get_time")
    a.kill()
    await s.wait_closed()

    b = await start(gateways(*flags))
    r, j, resumed = await resume(b.ws, created["session"]["id"], created["resume_token"],
                                 max(seqs(s.messages)))
    assert resumed["recovered"] is True and resumed["lost_response_id"] is None
    await r.send("conversation.item.retrieve", item_id=call["id"])
    k = await r.until_type("conversation.item.retrieved", start=j)
    assert r.messages[k].event["item"]["call_id"] == call["call_id"]
    await r.send("conversation.item.create", item={
        "type": "function_call_output", "call_id": call["call_id"], "output": "noon"})
    await r.send("response.create", response={"tool_choice": "auto"})
    k = await r.until_type("response.done", start=k)
    assert transcript_of(r.messages[k].event) == "the tool said noon "
    await r.send("session.update", session={})  # the tools came back with the session
    k = await r.until_type("session.updated", start=k)
    assert r.messages[k].event["session"]["tool_choice"] == "required"
    await r.close()
