"""Exotel Voicebot streams against real gateway processes on the tone plugin."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets
from call_checks import (
    assert_closed,
    assert_ended,
    assert_relayed,
    assert_resumed,
    assert_route_off,
    assert_truncated_once,
    keys_pressed,
)
from carrier_emulator import pcm_silence, pcm_tone, point_ms
from exotel_emulator import CREDENTIALS, RATE, ExotelCall, basic
from gateway_process import GatewayProcess
from redis_server import RedisServer
from tone_gateways import serving, serving_two
from twilio_helpers import Peek

from plugins.tone import decode_turn

WORD_MS = 200  # the tone plugin speaks each word as 200 ms of tone
WORDS = 3
PATH = "/v1/exotel/media-stream"


@pytest.fixture(scope="module")
def exotel_gw(tmp_path_factory: pytest.TempPathFactory,
              redis: RedisServer) -> Iterator[GatewayProcess]:
    yield from serving(tmp_path_factory.mktemp("gw"), redis, "--exotel-credentials", CREDENTIALS)


def url(gw: GatewayProcess) -> str:
    return f"ws://{gw.address}{PATH}"


async def dial(gw: GatewayProcess, words: int = WORDS, **kw: object) -> ExotelCall:
    return await ExotelCall.dial(url(gw), parameters={"instructions": f"words={words}"},
                                 **kw)  # type: ignore[arg-type]


async def say_turn(call: ExotelCall, seconds: float = 1.0) -> None:
    """One user turn: tone, then silence long enough for the VAD to end it."""
    await call.speak(pcm_tone(seconds, RATE) + pcm_silence(0.8, RATE))


async def test_full_turn(exotel_gw: GatewayProcess, peek: Peek) -> None:
    call = await dial(exotel_gw)
    p = call.playout
    try:
        await say_turn(call)
        rid = await p.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(call.pcm(), RATE) == 1
        # Exotel's sizes, in bytes: a multiple of 320, at least 3.2 KB
        assert all(n % 320 == 0 and n >= 3200 for n in p.chunk_sizes), p.chunk_sizes
        sent = p.points_of(rid)
        assert sent and p.played[-len(sent):] == sent  # every mark echoed, in order
        assert point_ms(sent[-1]) == pytest.approx(len(p.audio) / 16, abs=1)
        sid = await peek.session_of(call.call_sid, "exotel")
        assert sid is not None
        await call.stop()
        await asyncio.wait_for(call.ws.wait_closed(), 10)
        await assert_ended(peek, call.call_sid, "exotel", sid, "exotel_stop")
    finally:
        await call.close()


async def test_barge_in_clears_and_truncates_to_the_marks_heard(exotel_gw: GatewayProcess,
                                                                 peek: Peek) -> None:
    call = await dial(exotel_gw, words=40)  # an 8.8 s reply
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
        sid = await peek.session_of(call.call_sid, "exotel")
        sent = point_ms(p.points_of(first)[-1])
        end_ms = await assert_truncated_once(peek, sid, floor, heard, sent)
        assert any(abs(end_ms - int(h)) < 1 for h in heard)  # at a mark echoed
        assert p.flushed  # the clear echoed the pending marks
    finally:
        await call.close()


async def test_dtmf_is_conversation_input(exotel_gw: GatewayProcess, peek: Peek) -> None:
    call = await dial(exotel_gw)
    try:
        await say_turn(call)
        await call.playout.heard(1, 200)
        sid = await peek.session_of(call.call_sid, "exotel")
        await call.dtmf("7")
        await call.dtmf("#")
        await call.stop()
        await asyncio.wait_for(call.ws.wait_closed(), 10)
        assert await keys_pressed(peek, sid) == ["7", "#"]
    finally:
        await call.close()


async def test_a_dropped_socket_resumes_the_call(exotel_gw: GatewayProcess,
                                                 peek: Peek) -> None:
    first = await dial(exotel_gw)
    await say_turn(first)
    await first.playout.heard(1, (4 + WORDS) * WORD_MS)  # all of it: nothing in flight
    sid = await peek.session_of(first.call_sid, "exotel")
    await first.close()  # no "stop": the session waits out its grace
    second = await dial(exotel_gw, call_sid=first.call_sid)
    try:
        await say_turn(second)
        await second.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(second.pcm(), RATE) == 2  # the same conversation
        await assert_resumed(peek, first.call_sid, "exotel", sid)
    finally:
        await second.close()


async def test_16_khz_streams_speak_16_khz(exotel_gw: GatewayProcess) -> None:
    call = await dial(exotel_gw, media_format={"encoding": "audio/x-raw",
                                               "sample_rate": "16000", "bit_rate": "16"})
    try:
        await call.speak(pcm_tone(1.0, 16000) + pcm_silence(0.8, 16000), 16000)
        rid = await call.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(call.pcm(), 16000) == 1  # the reply is 16 kHz too
        assert all(n % 320 == 0 and n >= 3200 for n in call.playout.chunk_sizes)
        # the marks count 16 kHz time: 32 bytes a millisecond
        assert point_ms(call.playout.points_of(rid)[-1]) == pytest.approx(
            len(call.playout.audio) / 32, abs=1)
    finally:
        await call.close()


async def test_junk_does_not_end_the_call(exotel_gw: GatewayProcess) -> None:
    call = await dial(exotel_gw)
    try:
        def msg(event: str, **body: object) -> str:
            return json.dumps({"event": event, "stream_sid": call.stream_sid, **body})

        for text in ["not json", "[]", "{}", json.dumps({"event": 5}),
                     json.dumps({"event": "media", "media": {"payload": "AAAA"}}),
                     msg("media", media={"payload": "%%%"}), msg("media", media=3),
                     msg("media", media={"payload": 5}), msg("mark", mark={}),
                     msg("mark", mark={"name": "x:nan-ish"}), msg("dtmf", dtmf={"digit": 7}),
                     msg("start", start={}), msg("bogus", bogus={})]:
            await call.ws.send(text)
        await call.ws.send(b"\x00\x01binary")
        await say_turn(call)
        await call.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(call.pcm(), RATE) == 1
    finally:
        await call.close()


@pytest.mark.parametrize("headers", [
    {}, basic("exotel-key:wrong"), {"Authorization": "Basic %%"},
    {"Authorization": "Bearer " + CREDENTIALS},
    # the one other way past Basic auth is another gateway's relay proof: forged here
    {"x-duplex-relayed-by": "gw", "x-duplex-relay-proof": "0" * 64}])
async def test_streams_without_exotel_s_credentials_are_refused(
        exotel_gw: GatewayProcess, headers: dict[str, str]) -> None:
    ws = await websockets.connect(url(exotel_gw), additional_headers=headers)
    await assert_closed(ws, 1008)


async def test_without_credentials_the_route_is_off(gateway: GatewayProcess) -> None:
    await assert_route_off(url(gateway), additional_headers=basic())


@pytest.fixture
def pair(tmp_path: Path, redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    yield from serving_two(tmp_path, redis, "--exotel-credentials", CREDENTIALS)


async def test_a_second_stream_on_another_process_is_relayed_to_the_owner(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    a, b = pair
    first = await dial(a)
    second: ExotelCall | None = None
    try:
        await say_turn(first)
        await first.playout.heard(1, (4 + WORDS) * WORD_MS)
        sid = await peek.session_of(first.call_sid, "exotel")
        second = await dial(b, call_sid=first.call_sid)  # the same call lands on B
        await assert_closed(first.ws, 4000)  # replaced by its owner, A
        await say_turn(second)
        await second.playout.heard(1, (4 + WORDS) * WORD_MS)
        assert decode_turn(second.pcm(), RATE) == 2
        await assert_relayed(peek, a, b, "exotel", first.call_sid, sid, relayed_before=0)
    finally:
        await first.close()
        if second is not None:
            await second.close()


