"""A call's second media stream that reaches another gateway process is relayed to
the process owning the call's session (docs/architecture.md §7–8): the conversation
goes on, no takeover, no fork. Two signed gateways share one Redis and one Twilio auth token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from call_checks import assert_closed
from gateway_process import GatewayProcess
from redis_server import RedisServer
from tone_gateways import serving_two
from twilio_emulator import (
    Emulator,
    new_sid,
    parse_twiml,
    webhook,
)
from twilio_helpers import AUTH_TOKEN, WORD_MS, Peek, hear_reply, say_turn

from duplex.store import keys
from gateway.telephony.twilio import twilio_signature
from plugins.tone import decode_turn

WORDS = 3


@pytest.fixture
def pair(tmp_path: Path, redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two gateways signing with one Twilio auth token."""
    yield from serving_two(tmp_path, redis, "--twilio-auth-token", AUTH_TOKEN)


@pytest.fixture
def unsigned_pair(tmp_path: Path,
                  redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    yield from serving_two(tmp_path, redis)


def signed(url: str, params: dict[str, str] | None = None) -> dict[str, str]:
    return {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, url, (params or {}).items())}


async def dial_on(gw: GatewayProcess, call_sid: str) -> tuple[Emulator, object]:
    """Twilio's webhook to ``gw``, then the stream its TwiML names (on ``gw`` too)."""
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32, "From": "+15550001111",
            "To": "+15550002222", "CallStatus": "ringing"}
    url = f"{gw.http}/v1/twilio/voice?instructions=words%3D{WORDS}"
    async with httpx.AsyncClient() as http:
        resp = await http.post(url, data=form, headers=signed(url, form))
    assert resp.status_code == 200, resp.text
    twiml = parse_twiml(resp.text)
    return await Emulator.dial(twiml, call_sid, headers=signed(twiml.stream_url)), twiml


async def one_turn(em: Emulator, turn: int) -> None:
    """A turn on a stream that has had none, heard to its end: the ``turn``-th of the call."""
    await say_turn(em)
    await hear_reply(em, 1, (4 + WORDS) * WORD_MS)
    assert decode_turn(em.pcm(), 8000) == turn


async def test_a_second_stream_on_another_process_reaches_the_call_s_session(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    a, b = pair
    call_sid = new_sid("CA")
    first, twiml = await dial_on(a, call_sid)
    second: Emulator | None = None
    try:
        await one_turn(first, 1)
        sid = await peek.session_of(call_sid)
        # the same call's next stream lands on B (a load balancer's choice)
        on_b = f"ws://{b.address}/v1/twilio/media-stream"
        second = await Emulator.dial(twiml, call_sid, ws_url=on_b, headers=signed(on_b))
        await assert_closed(first.ws, 4000)  # replaced by its owner, A
        await one_turn(second, 2)  # the same conversation goes on
        assert await peek.session_of(call_sid) == sid
        meta = await peek.raw.hgetall(keys.meta(sid))
        assert (meta["owner"], meta["incarnation"]) == (await a.owner(), "1")
        types = [e["type"] for e in await peek.journal(str(sid))]
        assert types.count("session.created") == 1  # not forked
        assert await b.metric("duplex_resumes_relayed_total") == 1
    finally:
        await first.close()
        if second is not None:
            await second.close()


async def test_a_forged_relay_is_refused(pair: tuple[GatewayProcess, GatewayProcess]) -> None:
    a, _ = pair
    forged = await websockets.connect(
        f"ws://{a.address}/v1/twilio/media-stream",
        additional_headers={"x-duplex-relayed-by": "gw", "x-duplex-relay-proof": "0" * 64})
    await assert_closed(forged, 1008)


async def test_without_an_auth_token_a_stream_may_reach_another_process(
        unsigned_pair: tuple[GatewayProcess, GatewayProcess]) -> None:
    # the webhook on A mints the call's token; B accepts it (one key, kept in Redis)
    a, b = unsigned_pair
    call_sid = new_sid("CA")
    twiml = parse_twiml((await webhook(a.http, call_sid,
                                       query=f"?instructions=words%3D{WORDS}")).text)
    em = await Emulator.dial(twiml, call_sid, ws_url=f"ws://{b.address}/v1/twilio/media-stream")
    try:
        await one_turn(em, 1)
    finally:
        await em.close()


async def test_two_streams_of_one_call_at_once_on_two_processes_share_one_session(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    """Both streams look the call up before either has bound a session: each opens
    one, the slower one's bind loses, and that stream joins the winner's session
    (relayed to its owner) instead of taking it over or forking the call."""
    a, b = pair
    call_sid = new_sid("CA")
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32}
    url = f"{a.http}/v1/twilio/voice?instructions=words%3D{WORDS}"
    async with httpx.AsyncClient() as http:
        twiml = parse_twiml((await http.post(url, data=form, headers=signed(url, form))).text)
    on_b = f"ws://{b.address}/v1/twilio/media-stream"
    streams = await asyncio.gather(
        Emulator.dial(twiml, call_sid, headers=signed(twiml.stream_url)),
        Emulator.dial(twiml, call_sid, ws_url=on_b, headers=signed(on_b)))
    try:
        # exactly one of them is replaced (4000), at once: no 4 s takeover wait
        done, _ = await asyncio.wait([asyncio.ensure_future(s.ws.wait_closed())
                                      for s in streams],
                                     timeout=8, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1
        closed = [s for s in streams if s.ws.close_code is not None]
        assert [s.ws.close_code for s in closed] == [4000]
        live = next(s for s in streams if s not in closed)
        await one_turn(live, 1)
        sid = await peek.session_of(call_sid)
        meta = await peek.raw.hgetall(keys.meta(sid))
        assert meta["incarnation"] == "1"  # never taken over
    finally:
        for s in streams:
            await s.close()
