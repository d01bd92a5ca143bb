"""A phone call on a Valkey Cluster: the carrier bridge's call binding and stream
key are single keys, each on the primary that holds its slot. A Twilio call (the
carrier emulator of tests/telephony) holds a turn, and a second socket for the
same call finds the binding and resumes the session rather than forking it."""

from __future__ import annotations

import asyncio
import json

import pytest
from fault_helpers import GatewayFactory
from redis.asyncio.cluster import RedisCluster
from twilio_emulator import Emulator, new_sid, parse_twiml, webhook
from twilio_helpers import WORD_MS, hear_reply, say_turn
from valkey_cluster import ValkeyCluster

from gateway.telephony.calls import call_key
from plugins.tone import decode_turn

pytestmark = pytest.mark.slow

REPLY_MS = (4 + 3) * WORD_MS  # "answer to turn N:" and words=3


async def say_and_hear(em: Emulator, turn: int) -> None:
    await say_turn(em)
    await hear_reply(em, turn, REPLY_MS)


async def test_a_call_is_bound_on_the_cluster_and_a_second_socket_resumes_it(
        valkey_cluster: ValkeyCluster, gateways: GatewayFactory,
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
