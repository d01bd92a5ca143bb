"""The Vonage Voice API WebSocket against real gateway processes on the tone plugin."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from call_checks import (
    assert_closed,
    assert_relayed,
    assert_resumed,
    assert_route_off,
    assert_truncated_once,
    keys_pressed,
)
from carrier_emulator import pcm_silence, pcm_tone, point_ms
from gateway_process import GatewayProcess
from redis_server import RedisServer
from tone_gateways import serving, serving_two
from twilio_helpers import Peek
from vonage_emulator import RATE, SECRET, VonageCall, answer, new_uuid

from gateway.telephony.vonage import sign
from plugins.tone import decode_turn

WORD_MS = 200  # the tone plugin speaks each word as 200 ms of tone
WORDS = 3


@pytest.fixture(scope="module")
def vonage_gw(tmp_path_factory: pytest.TempPathFactory,
              redis: RedisServer) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("gw"), redis, "--vonage-signature-secret", SECRET)


async def ncco_of(gw: GatewayProcess, call_id: str, words: int = WORDS,
                  **kw: Any) -> list[dict[str, Any]]:
    resp = await answer(gw.http, call_id, query=f"?instructions=words%3D{words}", **kw)
    assert resp.status_code == 200, resp.text
    ncco: list[dict[str, Any]] = resp.json()
    return ncco


async def dial(gw: GatewayProcess, words: int = WORDS) -> VonageCall:
    return await VonageCall.dial(await ncco_of(gw, new_uuid(), words))


async def say_turn(call: VonageCall, seconds: float = 1.0) -> None:
    """One user turn: tone, then silence long enough for the VAD to end it."""
    await call.speak(pcm_tone(seconds, RATE) + pcm_silence(0.8, RATE))


async def test_the_answer_is_an_ncco_connecting_a_websocket(vonage_gw: GatewayProcess) -> None:
    call_id = new_uuid()
    for post in (False, True):
        [connect] = await ncco_of(vonage_gw, call_id, post=post)
        endpoint = connect["endpoint"][0]
        assert endpoint["uri"] == f"ws://{vonage_gw.address}/v1/vonage/media-stream"
        assert endpoint["content-type"] == "audio/l16;rate=16000"
        assert set(endpoint["headers"]) == {"call", "token", "instructions"}
        assert endpoint["headers"]["call"] == call_id
        assert len(json.dumps(endpoint["headers"])) <= 512  # Vonage's limit


async def test_full_turn_and_hang_up(vonage_gw: GatewayProcess, peek: Peek) -> None:
    call = await dial(vonage_gw)
    p = call.playout
    try:
        await say_turn(call)
        rid = await p.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(call.pcm(), RATE) == 1
        assert call.odd_frames == 0 and set(p.chunk_sizes) == {640}  # one frame a message
        sent = p.points_of(rid)
        assert sent and p.played[-len(sent):] == sent  # every notify echoed, in order
        assert point_ms(sent[-1]) == pytest.approx(len(p.audio) / 32, abs=1)
        sid = await peek.session_of(call.call_id, "vonage")
        assert sid is not None
        await call.hang_up()

        async def closed() -> list[dict[str, Any]]:
            while True:
                journal = await peek.journal(str(sid))
                forgotten = await peek.session_of(call.call_id, "vonage") is None
                if forgotten and journal and journal[-1]["type"] == "session.closed":
                    return journal
                await asyncio.sleep(0.05)  # polling Redis, not standing in for an event
        journal = await asyncio.wait_for(closed(), 10)
        assert journal[-1]["reason"] == "vonage_hangup"
        # and the call is forgotten (the wait above): its binding is gone
    finally:
        await call.close()


async def test_barge_in_clears_and_truncates_to_the_notifies_heard(
        vonage_gw: GatewayProcess, peek: Peek) -> None:
    call = await dial(vonage_gw, words=40)  # an 8.8 s reply
    p = call.playout
    try:
        await say_turn(call)
        first = await p.heard(1, 1000)
        floor = p.played_ms()
        await call.speak(pcm_tone(0.6, RATE) + pcm_silence(0.8, RATE))
        await p.until(lambda: p.clears == 1)
        assert p.played_before_clear is not None
        heard = [point_ms(n) for n in p.played_before_clear if n.startswith(first + ":")]
        await p.until(lambda: len(p.response_ids()) >= 2)  # the answer to the barge-in
        assert {"action": "clear"} in call.texts
        sid = await peek.session_of(call.call_id, "vonage")
        sent = point_ms(p.points_of(first)[-1])
        end_ms = await assert_truncated_once(peek, sid, floor, heard, sent)
        assert any(abs(end_ms - int(h)) < 1 for h in heard)  # at a notify echoed
    finally:
        await call.close()


async def test_dtmf_is_conversation_input(vonage_gw: GatewayProcess, peek: Peek) -> None:
    call = await dial(vonage_gw)
    try:
        await say_turn(call)
        await call.playout.heard(1, 200)
        sid = await peek.session_of(call.call_id, "vonage")
        await call.dtmf("7")
        await call.dtmf("#")
        await say_turn(call)  # a turn after the digits: they are in the journal by then
        await call.playout.heard(2, 200)
        assert await keys_pressed(peek, sid) == ["7", "#"]
    finally:
        await call.close()


async def test_a_dropped_socket_resumes_the_call(vonage_gw: GatewayProcess,
                                                 peek: Peek) -> None:
    ncco = await ncco_of(vonage_gw, new_uuid())
    first = await VonageCall.dial(ncco)
    await say_turn(first)
    await first.playout.heard(1, (4 + WORDS) * WORD_MS)  # all of it: nothing in flight
    sid = await peek.session_of(first.call_id, "vonage")
    await first.close(1011)  # dropped, not hung up: the session waits out its grace
    second = await VonageCall.dial(ncco)
    try:
        await say_turn(second)
        await second.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(second.pcm(), RATE) == 2  # the same conversation
        await assert_resumed(peek, first.call_id, "vonage", sid)
    finally:
        await second.close()


async def test_junk_does_not_end_the_call(vonage_gw: GatewayProcess) -> None:
    call = await dial(vonage_gw)
    try:
        for text in ["not json", "[]", "{}", json.dumps({"event": 5}),
                     json.dumps({"event": "websocket:dtmf", "digit": 7}),
                     json.dumps({"event": "websocket:notify", "payload": "x"}),
                     json.dumps({"event": "websocket:notify", "payload": {"name": "x:y"}}),
                     json.dumps({"event": "websocket:bogus"})]:
            await call.ws.send(text)
        await call.ws.send(b"\x00\x01\x02")  # an odd byte count
        await say_turn(call)
        await call.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(call.pcm(), RATE) == 1
    finally:
        await call.close()


@pytest.mark.parametrize("authorization", [
    "", "Bearer x.y.z", "Basic abc",
    "Bearer " + sign("another secret", b"", time.time()),
    "Bearer " + sign(SECRET, b"", time.time() - 3600),  # issued an hour ago
])
async def test_unsigned_or_forged_answers_are_refused(vonage_gw: GatewayProcess,
                                                      authorization: str) -> None:
    resp = await answer(vonage_gw.http, new_uuid(), authorization=authorization)
    assert resp.status_code == 401


async def test_a_body_that_is_not_the_signed_one_is_refused(vonage_gw: GatewayProcess) -> None:
    body = json.dumps({"uuid": new_uuid()}).encode()
    token = sign(SECRET, b'{"uuid": "another call"}', time.time())
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{vonage_gw.http}/v1/vonage/answer", content=body,
                               headers={"Authorization": "Bearer " + token})
    assert resp.status_code == 401


async def test_a_bad_stream_token_is_refused(vonage_gw: GatewayProcess) -> None:
    ncco = await ncco_of(vonage_gw, new_uuid())
    headers = dict(ncco[0]["endpoint"][0]["headers"])
    for forged in ({**headers, "token": "1.deadbeef"}, {**headers, "call": new_uuid()},
                   {**headers, "instructions": "words=9"}):
        call = await VonageCall.dial(ncco, headers=forged)
        try:
            await assert_closed(call.ws, 1008)
        finally:
            await call.close()


async def test_without_the_secret_the_routes_are_off(gateway: GatewayProcess) -> None:
    resp = await answer(gateway.http, new_uuid())
    assert resp.status_code == 404
    await assert_route_off(f"ws://{gateway.address}/v1/vonage/media-stream")


@pytest.fixture
def pair(tmp_path: Path, redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    yield from serving_two(tmp_path, redis, "--vonage-signature-secret", SECRET)


async def test_a_second_stream_on_another_process_is_relayed_to_the_owner(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    a, b = pair
    ncco = await ncco_of(a, new_uuid())
    first = await VonageCall.dial(ncco)
    second: VonageCall | None = None
    try:
        await say_turn(first)
        await first.playout.heard(1, (4 + WORDS) * WORD_MS)
        sid = await peek.session_of(first.call_id, "vonage")
        second = await VonageCall.dial(ncco, ws_url=f"ws://{b.address}/v1/vonage/media-stream")
        await assert_closed(first.ws, 4000)  # replaced by its owner, A
        await say_turn(second)
        await second.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(second.pcm(), RATE) == 2
        await assert_relayed(peek, a, b, "vonage", first.call_id, sid, relayed_before=0)
    finally:
        await first.close()
        if second is not None:
            await second.close()
