"""The Vonage signature secret, the Exotel credentials, the Plivo auth token and what
is made from them (JWTs, Basic auth, stream tokens) never reach a log line, at debug
level, through a signed Vonage call, a refused answer, an Exotel call, a refused
stream, a Plivo call and a forged Plivo answer. (Telnyx's credential is a public key.)"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import httpx
import websockets
from carrier_emulator import pcm_silence, pcm_tone
from exotel_emulator import CREDENTIALS, ExotelCall, basic
from gateway_process import GatewayProcess
from plivo_emulator import PlivoEmulator, answer_webhook, new_call_id, parse_stream_xml, signed
from redis_server import RedisServer
from tone_gateways import tone_gateway
from twilio_emulator import ulaw_silence, ulaw_tone
from twilio_helpers import AUTH_TOKEN
from vonage_emulator import SECRET, VonageCall, answer, new_uuid

from gateway.telephony.vonage import sign


async def _plivo_calls(gw: GatewayProcess) -> list[str]:
    """A forged answer, then a signed call with a turn; the secrets it was shown."""
    url = f"{gw.http}/v1/plivo/answer"
    forged = signed(url, {"CallUUID": "x"}, token="plivo-guess-123456")
    async with httpx.AsyncClient() as http:
        resp = await http.post(url, data={"CallUUID": "x"}, headers=forged)
    assert resp.status_code == 403
    call_id = new_call_id()
    xml = parse_stream_xml((await answer_webhook(gw.http, call_id,
                                                 query="?instructions=words%3D1")).text)
    plivo = await PlivoEmulator.dial(xml, call_id)
    await plivo.speak(ulaw_tone(0.6) + ulaw_silence(0.8))
    await plivo.playout.heard(1, 200)
    await plivo.hang_up()
    mac = dict(h.split("=", 1) for h in xml.attributes["extraHeaders"].split(","))["tokenmac"]
    return [AUTH_TOKEN, "plivo-guess-123456", mac]


async def test_carrier_credentials_never_reach_the_log(tmp_path: Path,
                                                       redis: RedisServer) -> None:
    gw = tone_gateway(tmp_path, redis, "--log-level", "debug", "--vonage-signature-secret",
                      SECRET, "--exotel-credentials", CREDENTIALS).start()
    jwt = sign(SECRET, b"", time.time())
    try:
        refused = await answer(gw.http, new_uuid(), authorization="Bearer " + jwt + "x")
        assert refused.status_code == 401
        resp = await answer(gw.http, new_uuid(), query="?instructions=words%3D1",
                            authorization="Bearer " + jwt)
        token = resp.json()[0]["endpoint"][0]["headers"]["token"]
        vonage = await VonageCall.dial(resp.json())
        await vonage.speak(pcm_tone(0.6, 16000) + pcm_silence(0.8, 16000))
        await vonage.playout.heard(1, 200)
        await vonage.close()
        exotel = await ExotelCall.dial(f"ws://{gw.address}/v1/exotel/media-stream",
                                       parameters={"instructions": "words=1"})
        await exotel.speak(pcm_tone(0.6, 8000) + pcm_silence(0.8, 8000))
        await exotel.playout.heard(1, 200)
        await exotel.stop()
        await asyncio.wait_for(exotel.ws.wait_closed(), 10)
        wrong = await websockets.connect(f"ws://{gw.address}/v1/exotel/media-stream",
                                         additional_headers=basic("exotel-key:guess-123456"))
        await asyncio.wait_for(wrong.wait_closed(), 10)
    finally:
        gw.stop()
    text = "\n".join(gw.output)
    assert "exotel media stream refused" in text  # the refusals were logged ...
    for secret in (SECRET, CREDENTIALS, jwt, token.split(".")[1], "guess-123456",
                   base64.b64encode(CREDENTIALS.encode()).decode()):
        assert secret not in text  # ... and no credential with them


async def test_the_plivo_auth_token_never_reaches_the_log(tmp_path: Path,
                                                         redis: RedisServer) -> None:
    gw = tone_gateway(tmp_path, redis, "--log-level", "debug",
                      "--plivo-auth-token", AUTH_TOKEN).start()
    try:
        shown = await _plivo_calls(gw)
    finally:
        gw.stop()
    text = "\n".join(gw.output)
    assert "plivo webhook refused" in text  # the forged answer was logged ...
    for secret in shown:
        assert secret not in text  # ... and no credential with it
