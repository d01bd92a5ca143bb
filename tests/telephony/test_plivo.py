"""Plivo audio streams against a real gateway process on the tone plugin."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import httpx
import pytest
from call_checks import (
    assert_closed,
    assert_resumed,
    assert_route_off,
    assert_truncated_once,
    keys_pressed,
)
from carrier_emulator import point_ms
from gateway_process import GatewayProcess
from plivo_emulator import (
    PlivoEmulator,
    answer_webhook,
    form,
    new_call_id,
    parse_stream_xml,
    signed,
)
from twilio_emulator import ulaw_silence, ulaw_tone
from twilio_helpers import Peek

from plugins.tone import decode_turn

WORD_MS = 200
WHOLE_REPLY_MS = (4 + 3) * WORD_MS  # words=3


async def dial(gw: GatewayProcess, instructions: str = "words=3") -> PlivoEmulator:
    call_id = new_call_id()
    resp = await answer_webhook(gw.http, call_id, query=f"?instructions={quote(instructions)}")
    assert resp.status_code == 200, resp.text
    return await PlivoEmulator.dial(parse_stream_xml(resp.text), call_id)


async def say_turn(em: PlivoEmulator) -> None:
    await em.speak(ulaw_tone(1.0) + ulaw_silence(0.8))


async def test_answer_is_a_bidirectional_stream_with_our_token(
        carrier_gateway: GatewayProcess) -> None:
    resp = await answer_webhook(carrier_gateway.http, new_call_id(), query="?instructions=x")
    assert resp.headers["content-type"].startswith("application/xml")
    xml = parse_stream_xml(resp.text)
    assert xml.stream_url == f"ws://{carrier_gateway.address}/v1/plivo/media-stream"
    assert xml.attributes["bidirectional"] == "true"
    assert xml.attributes["keepCallAlive"] == "true"
    assert xml.attributes["contentType"] == "audio/x-mulaw;rate=8000"
    keys = [pair.split("=")[0] for pair in xml.attributes["extraHeaders"].split(",")]
    assert keys == ["tokenexpires", "tokenmac", "instructionshex"]


async def test_a_full_turn_then_the_hang_up_ends_the_session(
        carrier_gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(carrier_gateway)
    try:
        await say_turn(em)
        rid = await em.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(em.pcm(), 8000) == 1
        sent = em.playout.points_of(rid)
        assert sent and em.playout.played[-len(sent):] == sent
        assert point_ms(sent[-1]) == pytest.approx(len(em.playout.audio) / 8, abs=1)
        sid = await peek.session_of(em.call_id, "plivo")
        assert sid is not None
        await em.hang_up()

        async def closed() -> list[dict[str, object]]:
            while True:
                journal = await peek.journal(sid)
                if journal[-1]["type"] == "session.closed":
                    return journal
                await asyncio.sleep(0.05)  # polling the store: Plivo's close has no answer

        journal = await asyncio.wait_for(closed(), 10)
        assert journal[-1]["reason"] == "plivo_hangup"
    finally:
        await em.close()


async def test_barge_in_clears_and_truncates_to_the_checkpoints_played(
        carrier_gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(carrier_gateway, "words=40")
    try:
        await say_turn(em)
        first = await em.playout.heard(1, 1000)
        floor = point_ms(em.playout.played[-1])
        await em.speak(ulaw_tone(0.6) + ulaw_silence(0.8))
        await em.playout.until(lambda: em.playout.clears == 1)
        heard = [point_ms(n) for n in em.playout.played_before_clear or []
                 if n.startswith(first + ":")]
        await em.playout.until(lambda: len(em.playout.response_ids()) >= 2)
        sid = await peek.session_of(em.call_id, "plivo")
        assert sid is not None
        await assert_truncated_once(peek, sid, floor, heard,
                                    point_ms(em.playout.points_of(first)[-1]))
        # Plivo never acknowledges what the clear dropped
        assert em.playout.flushed and not set(em.playout.flushed) & set(em.playout.played)
    finally:
        await em.close()


async def test_dtmf_is_conversation_input(carrier_gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(carrier_gateway)
    try:
        await say_turn(em)
        await em.playout.heard(1, 200)
        sid = await peek.session_of(em.call_id, "plivo")
        assert sid is not None
        await em.dtmf("5")
        await em.dtmf("*")
        await say_turn(em)  # the keys are read before this turn's reply
        await em.playout.heard(2, 200)
        assert await keys_pressed(peek, sid) == ["5", "*"]
    finally:
        await em.close()


async def test_a_dropped_socket_detaches_and_the_call_resumes(
        carrier_gateway: GatewayProcess, peek: Peek) -> None:
    call_id = new_call_id()
    xml = parse_stream_xml((await answer_webhook(carrier_gateway.http, call_id,
                                                 query="?instructions=words%3D3")).text)
    first = await PlivoEmulator.dial(xml, call_id)
    await say_turn(first)
    await first.playout.heard(1, WHOLE_REPLY_MS)
    sid = await peek.session_of(call_id, "plivo")
    await first.drop()
    second = await PlivoEmulator.dial(xml, call_id)
    try:
        await say_turn(second)
        await second.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(second.pcm(), 8000) == 2
        await assert_resumed(peek, call_id, "plivo", sid)
    finally:
        await second.close()


async def test_junk_never_ends_the_call(carrier_gateway: GatewayProcess) -> None:
    em = await dial(carrier_gateway)
    try:
        def msg(event: str, **body: object) -> str:
            return json.dumps({"event": event, "streamId": em.stream_id, **body})

        junk: list[str | bytes] = [
            "not json", "[]", "{}", json.dumps({"event": 5}), b"\x00\x01binary",
            json.dumps({"event": "media", "streamId": "other", "media": {"payload": "AAAA"}}),
            msg("media", media={"track": "inbound", "payload": "%%%not base64"}),
            msg("media", media=3), msg("dtmf"), msg("dtmf", dtmf={"digit": 7}),
            msg("playedStream"), msg("playedStream", name="x:not-a-number"),
            msg("clearedAudio"), msg("start", start={}), msg("stop"), msg("bogus")]
        for frame in junk:
            await em.ws.send(frame)
        await say_turn(em)
        await em.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(em.pcm(), 8000) == 1
    finally:
        await em.close()


async def test_bad_tokens_and_signatures_are_refused(carrier_gateway: GatewayProcess) -> None:
    gw, call_id = carrier_gateway, new_call_id()
    assert (await answer_webhook(gw.http, call_id, sign=False)).status_code == 403
    url, params = f"{gw.http}/v1/plivo/answer", form(call_id)
    async with httpx.AsyncClient() as http:
        forged = await http.post(url, data=params, headers=signed(url, params, "wrong-token"))
        moved = await http.post(url, data={**params, "From": "0"}, headers=signed(url, params))
    assert forged.status_code == 403 and moved.status_code == 403
    xml = parse_stream_xml((await answer_webhook(gw.http, call_id)).text)
    good = xml.attributes["extraHeaders"]
    for headers in ("tokenexpires=1;tokenmac=deadbeef", good + ",instructionshex=7a",
                    ""):
        em = await PlivoEmulator.dial(xml, call_id, extra_headers=headers)
        try:
            await assert_closed(em.ws, 1008)
        finally:
            await em.close()
    other = await PlivoEmulator.dial(xml, new_call_id())  # a token minted for another call
    try:
        await assert_closed(other.ws, 1008)
    finally:
        await other.close()


async def test_the_routes_are_off_without_an_auth_token(gateway: GatewayProcess) -> None:
    assert (await answer_webhook(gateway.http, new_call_id())).status_code == 404
    await assert_route_off(f"ws://{gateway.address}/v1/plivo/media-stream")
