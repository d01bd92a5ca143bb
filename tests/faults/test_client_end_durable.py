"""A client's 1000 ends its session even when the store cannot hear of it (issue 27).

The soak's careless clients hang up (code 1000) mid-reply, without ``session.close``,
and once one of them got a session it had closed back on a resume: Valkey had
stalled past ``--store-timeout-s`` as it hung up. The rule (docs/sessions.md,
"A client's end is final"): the end of a session the client ended is retried
until the store takes it, and until then no resume gets the session back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from client import eventually
from fault_helpers import GatewayFactory, Stream, meta
from gateway_process import GatewayProcess
from redis_server import RedisServer

LONG = 100  # words: the reply is still streaming when the client hangs up


async def reply_streaming(gw_ws: str) -> tuple[Stream, str, str]:
    """A session whose reply streams; its socket, id and resume token."""
    s = await Stream.open(gw_ws)
    await s.until_type("session.created")
    created = s.messages[0].event
    await s.send("session.update", session={"instructions": f"words={LONG}"})
    await s.speak(1.0)
    await s.until_type("response.output_audio.delta")
    return s, created["session"]["id"], created["resume_token"]


async def resume_answer(gw_ws: str, sid: str, token: str) -> tuple[dict, int | None]:
    """A resume of ``sid``: its first event and the socket's close code."""
    r = await Stream.open(f"{gw_ws}?resume={sid}")
    await r.send("session.resume", resume_token=token, last_received_server_event_seq=0)
    i = await r.until(lambda m: m.type in ("session.resumed", "error"), "an answer",
                      timeout=15)
    first = r.messages[i].event
    if first["type"] == "session.resumed":
        await r.close()
        return first, r.close_code
    return first, await r.wait_closed()


def _logged(gw: GatewayProcess, text: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(text in line for line in gw.output)
    return check


def _state(url: str, sid: str) -> Callable[[], Awaitable[str | None]]:
    async def check() -> str | None:
        state = (await meta(url, sid)).get("state")
        return state if state != "open" else None
    return check


async def assert_refused_then_ended(gw: GatewayProcess, url: str, sid: str,
                                    token: str) -> None:
    """A resume of the session its client closed is refused as an ended one's, and
    the end reaches the store."""
    first, code = await resume_answer(gw.ws, sid, token)
    assert first["type"] == "error", f"a session its client closed resumed: {first}"
    assert first["error"]["code"] == "session_resume_expired", first
    assert code == 1008
    assert await eventually(_state(url, sid), 15, "the end to reach the store") == "closed"


async def test_a_1000_close_while_the_store_is_down_ends_the_session(
        aof_redis: RedisServer, gateways: GatewayFactory) -> None:
    # A stopped server takes none of the gateway's writes: neither the terminal
    # nor the end reaches it, whatever the client library does with a timeout.
    gw = gateways("--redis-url", aof_redis.url, "--store-timeout-s", "0.5").start()
    s, sid, token = await reply_streaming(gw.ws)
    aof_redis.kill()
    await s.close()  # code 1000, mid-reply, without session.close
    await eventually(_logged(gw, f"session {sid}: close not persisted"), 15,
                     "the gateway to fail to persist the end")
    await asyncio.to_thread(aof_redis.start)  # same port, dir and AOF: still open there
    await assert_refused_then_ended(gw, aof_redis.url, sid, token)


async def test_a_1000_close_while_the_store_is_paused_ends_the_session(
        redis_server: RedisServer, gateways: GatewayFactory) -> None:
    # The soak's case: Valkey stalls past --store-timeout-s as the client hangs up.
    gw = gateways("--redis-url", redis_server.url, "--store-timeout-s", "0.5").start()
    s, sid, token = await reply_streaming(gw.ws)
    redis_server.pause()
    try:
        await s.close()  # code 1000, mid-reply, without session.close
        await eventually(_logged(gw, f"session {sid}: close not persisted"), 15,
                         "the gateway to fail to persist the end")
    finally:
        redis_server.resume()
    await assert_refused_then_ended(gw, redis_server.url, sid, token)
