"""A phone call on a Valkey Cluster: the carrier bridge's call binding and stream
key are single keys, each on the primary that holds its slot. A Twilio call (the
carrier emulator of tests/telephony) holds a turn, and a second socket for the
same call finds the binding and resumes the session rather than forking it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from gateway_process import GatewayProcess
from redis.asyncio.cluster import RedisCluster
from twilio_emulator import (
    Emulator,
    mark_ms,
    new_sid,
    parse_twiml,
    ulaw_silence,
    ulaw_tone,
    webhook,
)
from valkey_cluster import ValkeyCluster

from gateway.telephony.calls import call_key
from plugins.tone import decode_turn

pytestmark = pytest.mark.slow

WORD_MS = 200  # the tone plugin speaks each word as 200 ms of tone
REPLY_MS = (4 + 3) * WORD_MS  # "answer to turn N:" and words=3


async def say_and_hear(em: Emulator, turn: int) -> None:
    await em.speak(ulaw_tone(1.0) + ulaw_silence(0.8))
    await em.until(lambda: len(em.response_ids()) >= turn)
    rid = em.response_ids()[turn - 1]
    await em.until(lambda: any(mark_ms(n) >= REPLY_MS - 1 for n in em.played_marks
                               if n.startswith(rid + ":")))


async def test_a_call_is_bound_on_the_cluster_and_a_second_socket_resumes_it(
        valkey_cluster: ValkeyCluster, gateways: Callable[..., GatewayProcess],
        raw: RedisCluster) -> None:
    gw = gateways("--redis-url", valkey_cluster.url).start()
    call_sid = new_sid("CA")
    resp = await webhook(gw.http, call_sid, query="?instructions=words%3D3")
    assert resp.status_code == 200, resp.text
    twiml = parse_twiml(resp.text)
    first = await Emulator.dial(twiml, call_sid)
    second: Emulator | None = None
    try:
        await say_and_hear(first, 1)
        binding = json.loads(await raw.get(call_key(call_sid, "twilio")))
        second = await Emulator.dial(twiml, call_sid)  # the same call, a new stream
        await asyncio.wait_for(first.ws.wait_closed(), 30)
        await say_and_hear(second, 1)
        assert decode_turn(second.pcm(), 8000) == 2  # the same conversation goes on
        again = json.loads(await raw.get(call_key(call_sid, "twilio")))
        assert again["sid"] == binding["sid"]
        assert first.ws.close_code == 4000  # session.replaced
    finally:
        await first.close()
        if second is not None:
            await second.close()
