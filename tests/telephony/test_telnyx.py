"""Telnyx media streaming against a real gateway process on the tone plugin."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from call_checks import (
    assert_closed,
    assert_ended,
    assert_resumed,
    assert_route_off,
    assert_truncated_once,
    keys_pressed,
)
from carrier_emulator import point_ms
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gateway_process import GatewayProcess
from telnyx_emulator import (
    TelnyxEmulator,
    new_call_id,
    parse_texml,
    signed_headers,
    voice_webhook,
)
from twilio_emulator import ulaw_silence, ulaw_tone
from twilio_helpers import Peek

from plugins.tone import decode_turn

WORD_MS = 200  # the tone plugin speaks each word as 200 ms of tone
WHOLE_REPLY_MS = (4 + 3) * WORD_MS  # words=3


async def dial(gw: GatewayProcess, instructions: str = "words=3", *,
               ws_url: str | None = None) -> TelnyxEmulator:
    call_id = new_call_id()
    resp = await voice_webhook(gw.http, call_id, query=f"?instructions={quote(instructions)}")
    assert resp.status_code == 200, resp.text
    return await TelnyxEmulator.dial(parse_texml(resp.text), call_id, ws_url=ws_url)


async def say_turn(em: TelnyxEmulator) -> None:
    """One user turn: a second of tone, then silence long enough for the VAD to end it."""
    await em.speak(ulaw_tone(1.0) + ulaw_silence(0.8))


async def test_webhook_answers_texml_starting_a_bidirectional_stream(
        carrier_gateway: GatewayProcess) -> None:
    call_id = new_call_id()
    resp = await voice_webhook(carrier_gateway.http, call_id, query="?instructions=a%22%3Cb")
    assert resp.headers["content-type"].startswith("application/xml")
    texml = parse_texml(resp.text)
    assert texml.stream_url == f"ws://{carrier_gateway.address}/v1/telnyx/media-stream"
    assert texml.attributes["bidirectionalMode"] == "rtp"
    assert texml.attributes["bidirectionalCodec"] == texml.attributes["codec"] == "PCMU"
    assert texml.parameters["call"] == call_id
    assert texml.parameters["instructions"] == 'a"<b'
    assert "<Pause length=" in resp.text  # the call waits on the stream


async def test_a_full_turn_then_stop_ends_the_session(carrier_gateway: GatewayProcess,
                                                      peek: Peek) -> None:
    em = await dial(carrier_gateway)
    try:
        await say_turn(em)
        rid = await em.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(em.pcm(), 8000) == 1
        sent = em.playout.points_of(rid)
        assert sent and em.playout.played[-len(sent):] == sent  # every mark echoed, in order
        assert point_ms(sent[-1]) == pytest.approx(len(em.playout.audio) / 8, abs=1)
        sid = await peek.session_of(em.call_id, "telnyx")
        assert sid is not None
        await em.stop()
        await asyncio.wait_for(em.ws.wait_closed(), 10)
        await assert_ended(peek, em.call_id, "telnyx", sid, "telnyx_stop")
    finally:
        await em.close()


async def test_barge_in_clears_and_truncates_to_the_marks_heard(
        carrier_gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(carrier_gateway, "words=40")  # an 8.8 s reply
    try:
        await say_turn(em)
        first = await em.playout.heard(1, 1000)
        floor = point_ms(em.playout.played[-1])  # echoed before we barge in
        await em.speak(ulaw_tone(0.6) + ulaw_silence(0.8))
        await em.playout.until(lambda: em.playout.clears == 1)
        heard = [point_ms(n) for n in em.playout.played_before_clear or []
                 if n.startswith(first + ":")]
        await em.playout.until(lambda: len(em.playout.response_ids()) >= 2)
        sid = await peek.session_of(em.call_id, "telnyx")
        assert sid is not None
        await assert_truncated_once(peek, sid, floor, heard,
                                    point_ms(em.playout.points_of(first)[-1]))
        assert em.playout.flushed
    finally:
        await em.close()


async def test_dtmf_is_conversation_input(carrier_gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(carrier_gateway)
    try:
        await say_turn(em)
        await em.playout.heard(1, 200)
        sid = await peek.session_of(em.call_id, "telnyx")
        assert sid is not None
        await em.dtmf("7")
        await em.dtmf("#")
        await em.stop()
        await asyncio.wait_for(em.ws.wait_closed(), 10)
        assert await keys_pressed(peek, sid) == ["7", "#"]
    finally:
        await em.close()


async def test_a_dropped_socket_detaches_and_the_call_resumes(
        carrier_gateway: GatewayProcess, peek: Peek) -> None:
    call_id = new_call_id()
    texml = parse_texml((await voice_webhook(carrier_gateway.http, call_id,
                                             query="?instructions=words%3D3")).text)
    first = await TelnyxEmulator.dial(texml, call_id)
    await say_turn(first)
    await first.playout.heard(1, WHOLE_REPLY_MS)  # all of it: nothing left in flight
    sid = await peek.session_of(call_id, "telnyx")
    await first.drop()  # no stop: the session waits out its grace
    second = await TelnyxEmulator.dial(texml, call_id)
    try:
        await say_turn(second)
        await second.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(second.pcm(), 8000) == 2  # the same conversation goes on
        await assert_resumed(peek, call_id, "telnyx", sid)
    finally:
        await second.close()


async def test_l16_at_16_khz_both_ways(carrier_gateway: GatewayProcess) -> None:
    call_id = new_call_id()
    texml = parse_texml((await voice_webhook(carrier_gateway.http, call_id,
                                             query="?instructions=words%3D3")).text)
    texml.attributes.update(codec="L16", bidirectionalSamplingRate="16000")
    em = await TelnyxEmulator.dial(texml, call_id)
    try:
        t = np.arange(16000) / 16000
        tone = (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(">i2").tobytes()
        await em.speak(tone + np.zeros(12800, dtype=">i2").tobytes())
        await em.playout.heard(1, WHOLE_REPLY_MS - 20)  # the resampler holds a few samples
        assert decode_turn(em.pcm(), 16000) == 1
    finally:
        await em.close()


async def test_junk_never_ends_the_call(carrier_gateway: GatewayProcess) -> None:
    em = await dial(carrier_gateway)
    try:
        def msg(event: str, **body: object) -> str:
            return json.dumps({"event": event, "stream_id": em.stream_id, **body})

        junk: list[str | bytes] = [
            "not json", "[]", "{}", json.dumps({"event": 5}), b"\x00\x01binary",
            json.dumps({"event": "media", "media": {"payload": "AAAA"}}),  # no stream_id
            msg("media", media={"track": "inbound", "payload": "%%%not base64"}),
            msg("media", media=3), msg("media", media={"payload": 5}),
            msg("mark", mark={}), msg("mark", mark={"name": "x:not-a-number"}),
            msg("dtmf"), msg("dtmf", dtmf={"digit": 7}), msg("error", payload={"code": 1}),
            msg("start", start={}), msg("connected"), msg("bogus", bogus={})]
        for frame in junk:
            await em.ws.send(frame)
        await say_turn(em)
        await em.playout.heard(1, WHOLE_REPLY_MS)
        assert decode_turn(em.pcm(), 8000) == 1
    finally:
        await em.close()


async def test_bad_tokens_and_signatures_are_refused(carrier_gateway: GatewayProcess) -> None:
    gw, call_id = carrier_gateway, new_call_id()
    unsigned = await voice_webhook(gw.http, call_id, sign=False)
    assert unsigned.status_code == 403
    body = b"CallSid=v3%3Aforged"
    async with httpx.AsyncClient() as http:
        url = f"{gw.http}/v1/telnyx/voice"
        forged = await http.post(url, content=body,
                                 headers=signed_headers(body, Ed25519PrivateKey.generate()))
        stale = await http.post(url, content=body,
                                headers=signed_headers(body, timestamp=1_600_000_000))
        good = await http.post(url, content=body, headers=signed_headers(body))
    assert forged.status_code == 403 and stale.status_code == 403
    assert good.status_code == 200
    texml = parse_texml(good.text)
    for params in ({**texml.parameters, "token": "1.deadbeef"},
                   {**texml.parameters, "call": new_call_id()},  # another call's token
                   {**texml.parameters, "instructions": "words=99"}):  # forged parameter
        em = await TelnyxEmulator.dial(texml, "v3:forged", parameters=params)
        try:
            await assert_closed(em.ws, 1008)
        finally:
            await em.close()


async def test_the_routes_are_off_without_a_public_key(gateway: GatewayProcess) -> None:
    resp = await voice_webhook(gateway.http, new_call_id())
    assert resp.status_code == 404
    await assert_route_off(f"ws://{gateway.address}/v1/telnyx/media-stream")
