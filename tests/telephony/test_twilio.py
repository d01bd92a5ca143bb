"""Twilio Media Streams against a real gateway process on the tone plugin."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import httpx
import pytest
import websockets
from call_checks import assert_closed, assert_ended
from gateway_process import GatewayProcess
from twilio_emulator import (
    Emulator,
    mark_ms,
    new_sid,
    parse_twiml,
    ulaw_silence,
    ulaw_tone,
    webhook,
)
from twilio_helpers import AUTH_TOKEN, WORD_MS, Peek, hear_reply, say_turn

from gateway.telephony.twilio import twilio_signature
from plugins.tone import decode_turn


async def dial(gateway: GatewayProcess, instructions: str = "") -> Emulator:
    call_sid = new_sid("CA")
    query = f"?instructions={quote(instructions)}" if instructions else ""
    resp = await webhook(gateway.http, call_sid, query=query)
    assert resp.status_code == 200, resp.text
    return await Emulator.dial(parse_twiml(resp.text), call_sid)


async def test_webhook_returns_twiml_with_a_token(gateway: GatewayProcess) -> None:
    resp = await webhook(gateway.http, new_sid("CA"), query="?instructions=a%22%3Cb")
    assert resp.headers["content-type"].startswith("application/xml")
    twiml = parse_twiml(resp.text)
    assert twiml.stream_url == f"ws://{gateway.address}/v1/twilio/media-stream"
    assert set(twiml.parameters) == {"token", "instructions"}
    assert "&quot;&lt;" in resp.text  # XML-escaped


async def test_full_turn(gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(gateway, "words=3")
    try:
        await say_turn(em)
        rid = await hear_reply(em, 1, (4 + 3) * WORD_MS)
        assert decode_turn(em.pcm(), 8000) == 1
        sent = em.marks_of(rid)
        assert sent and em.played_marks[-len(sent):] == sent  # every mark echoed, in order
        assert mark_ms(sent[-1]) == pytest.approx(len(em.audio) / 8, abs=1)
        sid = await peek.session_of(em.call_sid)
        assert sid is not None
        await em.stop()
        await asyncio.wait_for(em.ws.wait_closed(), 10)
        await assert_ended(peek, em.call_sid, "twilio", sid, "twilio_stop")
    finally:
        await em.close()


async def test_barge_in_truncates_to_the_marks_heard(gateway: GatewayProcess,
                                                      peek: Peek) -> None:
    em = await dial(gateway, "words=40")  # an 8.8 s reply
    try:
        await say_turn(em)
        first = await hear_reply(em, 1, 1000)
        floor = em.played_ms()  # Twilio echoed this before we barge in
        await em.speak(ulaw_tone(0.6) + ulaw_silence(0.8))
        await em.until(lambda: em.clears == 1)
        assert em.marks_before_clear is not None
        heard = [mark_ms(n) for n in em.marks_before_clear if n.startswith(first + ":")]
        await em.until(lambda: len(em.response_ids()) >= 2)  # the answer to the barge-in
        sid = await peek.session_of(em.call_sid)
        assert sid is not None
        journal = await peek.journal(sid)
        truncs = [e for e in journal if e["type"] == "conversation.item.truncated"]
        assert len(truncs) == 1
        end_ms = truncs[0]["audio_end_ms"]
        # Played time from the marks echoed before the clear, never wall clock (I6).
        assert floor - 1 <= end_ms <= heard[-1]
        assert any(abs(end_ms - int(h)) < 1 for h in heard)
        sent = mark_ms(em.marks_of(first)[-1])
        assert end_ms < sent  # some audio was sent but flushed, not heard
        assert em.flushed_marks  # the clear flushed pending marks ...
        done = next(e for e in journal if e["type"] == "response.done"
                    and e["response"]["id"] == first)
        assert done["response"]["status"] == "cancelled"
        item = next(i for i in await peek.history(sid) if i["id"] == truncs[0]["item_id"])
        words = item["content"][0]["transcript"].split()
        assert len(words) <= end_ms // WORD_MS + 1  # history holds only what was heard
    finally:
        await em.close()


async def test_dtmf_event_in_journal(gateway: GatewayProcess, peek: Peek) -> None:
    em = await dial(gateway, "words=3")
    try:
        await say_turn(em)
        await hear_reply(em, 1, 200)
        sid = await peek.session_of(em.call_sid)
        assert sid is not None
        await em.dtmf("7")
        await em.dtmf("#")
        await em.stop()
        await asyncio.wait_for(em.ws.wait_closed(), 10)
        journal = await peek.journal(sid)
        dtmf = [e for e in journal if e["type"] == "input_audio_buffer.dtmf_event_received"]
        assert [e["event"] for e in dtmf] == ["7", "#"]
        assert all(isinstance(e["received_at"], float) for e in dtmf)
        assert journal[-1]["type"] == "session.closed"
    finally:
        await em.close()


async def test_second_socket_takes_the_call_over(gateway: GatewayProcess, peek: Peek) -> None:
    call_sid = new_sid("CA")
    resp = await webhook(gateway.http, call_sid, query="?instructions=words%3D3")
    twiml = parse_twiml(resp.text)
    first = await Emulator.dial(twiml, call_sid)
    second: Emulator | None = None
    try:
        await say_turn(first)
        await hear_reply(first, 1, (4 + 3) * WORD_MS)  # all of it: nothing left in flight
        sid = await peek.session_of(call_sid)
        second = await Emulator.dial(twiml, call_sid)  # same call, new streamSid
        await asyncio.wait_for(first.ws.wait_closed(), 10)
        await say_turn(second)
        await hear_reply(second, 1, (4 + 3) * WORD_MS)
        assert decode_turn(second.pcm(), 8000) == 2  # the same conversation goes on
        assert await peek.session_of(call_sid) == sid
        types = [e["type"] for e in await peek.journal(str(sid))]
        assert types.count("session.created") == 1  # resumed, not forked
        assert first.ws.close_code == 4000  # session.replaced
    finally:
        await first.close()
        if second is not None:
            await second.close()


async def test_malformed_messages_do_not_end_the_call(gateway: GatewayProcess) -> None:
    em = await dial(gateway, "words=3")
    try:
        junk = ["not json", "[]", "{}", json.dumps({"event": 5}),
                json.dumps({"event": "media", "media": {"payload": "AAAA"}}),  # no streamSid
                json.dumps({"event": "media", "streamSid": em.stream_sid,
                            "media": {"payload": "%%%not base64"}}),
                json.dumps({"event": "media", "streamSid": em.stream_sid, "media": 3}),
                json.dumps({"event": "mark", "streamSid": em.stream_sid, "mark": {}}),
                json.dumps({"event": "mark", "streamSid": em.stream_sid,
                            "mark": {"name": "x:not-a-number"}}),
                json.dumps({"event": "dtmf", "streamSid": em.stream_sid}),
                json.dumps({"event": "bogus", "streamSid": em.stream_sid})]
        for text in junk:
            await em.ws.send(text)
        await em.ws.send(b"\x00\x01binary")
        await say_turn(em)
        await hear_reply(em, 1, (4 + 3) * WORD_MS)
        assert decode_turn(em.pcm(), 8000) == 1
    finally:
        await em.close()


async def test_bad_stream_token_is_refused(gateway: GatewayProcess) -> None:
    call_sid = new_sid("CA")
    twiml = parse_twiml((await webhook(gateway.http, call_sid)).text)
    em = await Emulator.dial(twiml, call_sid, parameters={"token": "1.deadbeef"})
    try:
        await assert_closed(em.ws, 1008)
    finally:
        await em.close()
    other = await Emulator.dial(twiml, new_sid("CA"))  # a token minted for another call
    try:
        await assert_closed(other.ws, 1008)
    finally:
        await other.close()


def _twilio_validator() -> object | None:
    try:
        from twilio.request_validator import RequestValidator
    except ImportError:
        return None
    return RequestValidator(AUTH_TOKEN)


def _sign(url: str, params: dict[str, str]) -> str:
    return twilio_signature(AUTH_TOKEN, url, params.items())


def test_signature_matches_the_twilio_library() -> None:
    validator = _twilio_validator()
    if validator is None:
        pytest.skip("the twilio package is not installed")
    url = "https://example.com/v1/twilio/voice?x=1&y=%20z"
    params = {"CallSid": "CA123", "From": "+1555", "Digits": "1234", "Body": "a&b=c"}
    assert _sign(url, params) == validator.compute_signature(url, params)  # type: ignore[attr-defined]
    wss = "wss://example.com/v1/twilio/media-stream"
    assert _sign(wss, {}) == validator.compute_signature(wss, {})  # type: ignore[attr-defined]


async def test_signed_webhook_and_stream(signed_gateway: GatewayProcess) -> None:
    gw = signed_gateway
    call_sid = new_sid("CA")
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32, "From": "+15550001111",
            "To": "+15550002222", "CallStatus": "ringing"}
    url = f"{gw.http}/v1/twilio/voice"
    async with httpx.AsyncClient() as http:
        bad = await http.post(url, data=form, headers={"X-Twilio-Signature": "AAAA"})
        missing = await http.post(url, data=form)
        good = await http.post(url, data=form,
                               headers={"X-Twilio-Signature": _sign(url, form)})
    assert bad.status_code == 403 and missing.status_code == 403
    assert good.status_code == 200
    twiml = parse_twiml(good.text)
    unsigned = await websockets.connect(twiml.stream_url)
    await assert_closed(unsigned, 1008)
    signature = _sign(twiml.stream_url, {})
    em = await Emulator.dial(twiml, call_sid, headers={"X-Twilio-Signature": signature})
    try:
        await em.stop()
        await assert_closed(em.ws, 1000)
    finally:
        await em.close()


async def test_a_dropped_socket_detaches_and_the_call_can_resume(gateway: GatewayProcess,
                                                                 peek: Peek) -> None:
    call_sid = new_sid("CA")
    twiml = parse_twiml((await webhook(gateway.http, call_sid,
                                       query="?instructions=words%3D3")).text)
    first = await Emulator.dial(twiml, call_sid)
    await say_turn(first)
    await hear_reply(first, 1, (4 + 3) * WORD_MS)  # all of it: nothing left in flight
    sid = await peek.session_of(call_sid)
    await first.close()  # no "stop": the session waits out its grace
    second = await Emulator.dial(twiml, call_sid)
    try:
        await say_turn(second)
        await hear_reply(second, 1, (4 + 3) * WORD_MS)
        assert decode_turn(second.pcm(), 8000) == 2
        assert await peek.session_of(call_sid) == sid
        types = [e["type"] for e in await peek.journal(str(sid))]
        assert "session.closed" not in types
    finally:
        await second.close()
