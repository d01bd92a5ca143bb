"""The Vonage signature secret, the Exotel credentials and what is made from them
(JWTs, Basic auth, stream tokens) never reach a log line, at debug level, through
a signed Vonage call, a refused answer, an Exotel call and a refused stream."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import websockets
from carrier_emulator import pcm_silence, pcm_tone
from exotel_emulator import CREDENTIALS, ExotelCall, basic
from gateway_process import GatewayProcess
from redis_server import RedisServer
from vonage_emulator import SECRET, VonageCall, answer, new_uuid

from gateway.telephony.vonage import sign


async def test_carrier_credentials_never_reach_the_log(tmp_path: Path,
                                                       redis: RedisServer) -> None:
    gw = GatewayProcess(tmp_path, args=[
        "--plugin", "tone", "--output-lead-ms", "300", "--redis-url", redis.url,
        "--log-level", "debug", "--vonage-signature-secret", SECRET,
        "--exotel-credentials", CREDENTIALS]).start()
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
