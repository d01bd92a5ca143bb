"""Hostile Twilio messages (issue 10): ignored with a rate-limited log line; the call lives."""

from __future__ import annotations

import json

import websockets
from gateway_process import GatewayProcess
from hostile import DEEP, Hostile, deep
from twilio_emulator import Emulator, new_sid, parse_twiml, webhook
from twilio_helpers import WORD_MS, hear_reply, say_turn

from plugins.tone import decode_turn

JUNK = 60  # of each kind: one warning line each, not 60


def warnings(gateway: GatewayProcess, since: int, needle: str) -> list[str]:
    return [line for line in gateway.output[since:] if "WARNING" in line and needle in line]


async def test_junk_before_and_after_start_is_ignored_and_the_call_goes_on(
        gateway: GatewayProcess) -> None:
    call_sid = new_sid("CA")
    twiml = parse_twiml((await webhook(gateway.http, call_sid, query="?instructions=words%3D3"
                                       )).text)
    since = len(gateway.output)
    ws = await websockets.connect(twiml.stream_url)
    em = Emulator(ws, call_sid)
    try:
        for _ in range(JUNK):  # used to end the socket with no close frame (1006)
            await ws.send(deep(DEEP, "{"))
        await ws.send('{"event": "connected", "x": "\\ud800"}')
        await em.start(twiml.parameters)
        for frame in _after_start(em.stream_sid):
            await ws.send(frame)
        await say_turn(em)
        await hear_reply(em, 1, (4 + 3) * WORD_MS)
        assert decode_turn(em.pcm(), 8000) == 1
    finally:
        await em.close()
    assert gateway.proc is not None and gateway.proc.poll() is None
    assert not [line for line in gateway.output[since:] if "Traceback" in line]
    # a flood of one kind is one line (the window is 10 s, this test is shorter)
    assert len(warnings(gateway, since, "not usable JSON (json_too_deep)")) == 1
    assert len(warnings(gateway, since, "track/payload is not a string")) == 1
    assert len(warnings(gateway, since, "unknown event")) == 1


def _after_start(stream_sid: str) -> list[str | bytes]:
    def msg(event: str, **body: object) -> str:
        return json.dumps({"event": event, "streamSid": stream_sid, **body})

    frames: list[str | bytes] = []
    for i in range(JUNK):
        frames += [
            msg("media", media={"track": "inbound", "payload": 5}),  # used to kill the call
            msg("media", media={"track": ["inbound"], "payload": "AAAA"}),
            msg("media", media=[1]),
            msg("mark", mark={"name": {"n": 1}}),
            msg("dtmf", dtmf={"digit": 7}),
            msg("frobnicate", frobnicate={}),
            msg("media", media={"payload": "AAAA", "timestamp": 1e400}),
            msg("media", media={"payload": "\\ud800"}).replace("\\\\ud800", "\\ud800"),
            msg("media", media={"payload": "*not base64*"}),
            b"\x00\x01",
            Hostile(i).message(),
        ]
    return frames
