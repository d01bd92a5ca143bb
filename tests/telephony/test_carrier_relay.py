"""A Telnyx or Plivo call's second media stream that reaches another gateway process
is relayed to the process owning the call's session (docs/architecture.md §7–8):
the conversation goes on, no takeover, no fork. Two gateways share one Redis and
the carriers' credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from call_checks import assert_closed, assert_relayed
from carrier_flags import CARRIER_FLAGS
from gateway_process import GatewayProcess
from plivo_emulator import PlivoEmulator, answer_webhook, parse_stream_xml
from plivo_emulator import new_call_id as new_plivo_call
from redis_server import RedisServer
from telnyx_emulator import TelnyxEmulator, parse_texml, voice_webhook
from telnyx_emulator import new_call_id as new_telnyx_call
from tone_gateways import serving_two
from twilio_emulator import ulaw_silence, ulaw_tone
from twilio_helpers import Peek

from plugins.tone import decode_turn

WHOLE_REPLY_MS = (4 + 3) * 200  # words=3


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory,
         redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    yield from serving_two(Path(tmp_path_factory.mktemp("pair")), redis, *CARRIER_FLAGS)


async def one_turn(em: TelnyxEmulator | PlivoEmulator, turn: int) -> None:
    await em.speak(ulaw_tone(1.0) + ulaw_silence(0.8))
    await em.playout.heard(1, WHOLE_REPLY_MS)
    assert decode_turn(em.pcm(), 8000) == turn


async def test_a_telnyx_stream_on_another_process_reaches_the_call_s_session(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    a, b = pair
    call_id = new_telnyx_call()
    texml = parse_texml((await voice_webhook(a.http, call_id,
                                             query="?instructions=words%3D3")).text)
    first = await TelnyxEmulator.dial(texml, call_id)
    second: TelnyxEmulator | None = None
    try:
        await one_turn(first, 1)
        sid = await peek.session_of(call_id, "telnyx")
        relayed = await b.metric("duplex_resumes_relayed_total")
        second = await TelnyxEmulator.dial(texml, call_id,
                                           ws_url=f"ws://{b.address}/v1/telnyx/media-stream")
        await assert_closed(first.ws, 4000)  # replaced by its owner, A
        await one_turn(second, 2)
        await assert_relayed(peek, a, b, "telnyx", call_id, sid, relayed)
    finally:
        await first.close()
        if second is not None:
            await second.close()


async def test_a_plivo_stream_on_another_process_reaches_the_call_s_session(
        pair: tuple[GatewayProcess, GatewayProcess], peek: Peek) -> None:
    a, b = pair
    call_id = new_plivo_call()
    xml = parse_stream_xml((await answer_webhook(a.http, call_id,
                                                 query="?instructions=words%3D3")).text)
    first = await PlivoEmulator.dial(xml, call_id)
    second: PlivoEmulator | None = None
    try:
        await one_turn(first, 1)
        sid = await peek.session_of(call_id, "plivo")
        relayed = await b.metric("duplex_resumes_relayed_total")
        second = await PlivoEmulator.dial(xml, call_id,
                                          ws_url=f"ws://{b.address}/v1/plivo/media-stream")
        await assert_closed(first.ws, 4000)
        await one_turn(second, 2)
        await assert_relayed(peek, a, b, "plivo", call_id, sid, relayed)
    finally:
        await first.close()
        if second is not None:
            await second.close()
