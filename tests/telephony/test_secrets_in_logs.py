"""No secret reaches a log line at any level (docs/deployment.md "Security").

Two keyed, Twilio-signed gateways on one Redis, both at ``--log-level debug``,
are driven through every path that handles a credential: the API key as a
Bearer header, as the browser subprotocol, wrong, and in the URL; a realtime
resume relayed from B to its owner A (the relay carries the key); ``/metrics``
and ``/readyz``; a signed Twilio call whose second stream is relayed too (the
relay carries a proof). Once both have stopped, no key, token, signature or
resume token appears anywhere in what they wrote.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from call_checks import assert_closed
from gateway_process import GatewayProcess
from redis_server import RedisServer
from tone_gateways import serving_two
from twilio_emulator import Emulator, new_sid, parse_twiml
from twilio_helpers import AUTH_TOKEN, Peek

from gateway.log_redaction import MASK
from gateway.telephony.twilio import twilio_signature

KEY = "dg-key-" + secrets.token_hex(16)
WRONG = "dg-wrong-" + secrets.token_hex(16)
BEARER = {"Authorization": f"Bearer {KEY}"}
ORIGIN = {"Origin": "http://localhost:5173"}


@pytest.fixture
def pair(tmp_path: Path, redis: RedisServer) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    yield from serving_two(tmp_path, redis, "--api-key", KEY, "--twilio-auth-token", AUTH_TOKEN,
                           "--log-level", "debug")


async def first_event(ws: websockets.ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return event


async def realtime_paths(a: GatewayProcess, b: GatewayProcess) -> list[str]:
    """The key every way, and a resume relayed B → A; the resume tokens seen."""
    ws = await websockets.connect(a.ws, additional_headers={**BEARER, **ORIGIN})
    created = await first_event(ws)
    assert created["type"] == "session.created"
    ws.transport.abort()  # a dropped network: the session detaches on A
    relayed = await websockets.connect(
        f"{b.ws}?resume={created['session']['id']}", additional_headers=ORIGIN,
        subprotocols=[websockets.Subprotocol("realtime"),
                      websockets.Subprotocol(f"openai-insecure-api-key.{KEY}")])
    await relayed.send(json.dumps({"type": "session.resume",
                                   "resume_token": created["resume_token"],
                                   "last_received_server_event_seq": 0}))
    resumed = await first_event(relayed)
    assert resumed["type"] == "session.resumed", resumed
    await relayed.close()
    for url, headers in ((a.ws, {"Authorization": f"Bearer {WRONG}"}),
                         (f"{a.ws}?api_key={KEY}", {})):
        refused = await websockets.connect(url, additional_headers=headers)
        assert (await first_event(refused))["error"]["code"] == "invalid_api_key"
        await refused.close()
    return [created["resume_token"], resumed["resume_token"]]


async def http_paths(a: GatewayProcess, b: GatewayProcess) -> None:
    async with httpx.AsyncClient(timeout=5.0) as http:
        assert (await http.get(f"{a.http}/metrics", params={"api_key": KEY})).status_code == 401
        assert (await http.get(f"{a.http}/readyz", headers=BEARER)).json()["owner"]
        relays = (await http.get(f"{b.http}/metrics", headers=BEARER)).text
    assert "duplex_resumes_relayed_total 1.0" in relays  # the resume went through B's relay


async def twilio_paths(a: GatewayProcess, b: GatewayProcess, peek: Peek) -> list[str]:
    """A signed call on A whose second stream lands on B; the credentials it used."""
    call_sid = new_sid("CA")
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32}
    url = f"{a.http}/v1/twilio/voice"
    webhook_signature = twilio_signature(AUTH_TOKEN, url, form.items())
    async with httpx.AsyncClient() as http:
        twiml = parse_twiml((await http.post(url, data=form, headers={
            "X-Twilio-Signature": webhook_signature})).text)
    used = [webhook_signature, twiml.parameters["token"]]
    first = await Emulator.dial(twiml, call_sid, headers={
        "X-Twilio-Signature": twilio_signature(AUTH_TOKEN, twiml.stream_url, ())})
    for _ in range(500):  # A bound the call (else B may bind it first): a bounded poll
        if await peek.session_of(call_sid):
            break
        await asyncio.sleep(0.02)
    on_b = f"ws://{b.address}/v1/twilio/media-stream"
    used.append(twilio_signature(AUTH_TOKEN, on_b, ()))
    second = await Emulator.dial(twiml, call_sid, ws_url=on_b,
                                 headers={"X-Twilio-Signature": used[-1]})
    try:
        await assert_closed(first.ws, 4000)  # replaced through B's relay to A
        await second.stop()
        await asyncio.wait_for(second.ws.wait_closed(), 10)
    finally:
        await first.close()
        await second.close()
    return used


async def logged_to_the_end(gw: GatewayProcess, timeout: float = 10.0) -> None:
    """Once a stopped gateway's last line (uvicorn's) has been read from its pipe."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not any("Finished server process" in line for line in gw.output):
        assert loop.time() < deadline, "the gateway's log did not end"
        await asyncio.sleep(0.02)


async def test_no_secret_is_logged_at_debug(pair: tuple[GatewayProcess, GatewayProcess],
                                            peek: Peek) -> None:
    a, b = pair
    seen = await realtime_paths(a, b)
    await http_paths(a, b)
    seen += await twilio_paths(a, b, peek)
    for gw in (a, b):
        await asyncio.to_thread(gw.stop)  # what they log while stopping counts too
        await logged_to_the_end(gw)
    logs = {"a": "".join(a.output), "b": "".join(b.output)}
    for name, text in logs.items():
        assert " DEBUG " in text, f"{name} did not log at debug"
        for secret in (KEY, WRONG, AUTH_TOKEN, *seen):
            assert secret not in text, f"{name} logged a secret: {secret[:6]}…"
    # the access log still shows the request, the key masked
    assert f"?api_key={MASK}" in logs["a"]
