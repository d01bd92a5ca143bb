"""What ``POST /v1/realtime/calls`` refuses, and that a refusal or an abandoned offer
leaves nothing behind: no session open in the store, no peer connection, no task."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from client import eventually, meta
from client import valkey as valkey_of
from gateway_process import GatewayProcess, running_tone
from peer_client import PeerClient, offer
from webrtc_limits import ICE_TIMEOUT_S

KEY = "sk-webrtc-test"


async def offered_sdp(*, channel: bool = True) -> str:
    pc, _, _ = await offer() if channel else (None, None, None)
    if pc is None:
        from aiortc import RTCConfiguration, RTCPeerConnection
        from peer_client import ReplyTrack, Speaker
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(ReplyTrack(Speaker()))
        await pc.setLocalDescription(await pc.createOffer())
    sdp = str(pc.localDescription.sdp)
    await pc.close()
    return sdp


async def post(gateway: GatewayProcess, content: str | bytes,
               content_type: str = "application/sdp", **kwargs: object) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.http, timeout=30.0) as http:
        return await http.post("/v1/realtime/calls", content=content,
                               headers={"Content-Type": content_type}, **kwargs)


async def nothing_left(gateway: GatewayProcess) -> None:
    assert await gateway.metric("duplex_sessions_active") == 0
    assert await gateway.metric("duplex_webrtc_calls_active") == 0


async def refused(gateway: GatewayProcess, response: httpx.Response, code: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error"
    assert error["message"]
    await nothing_left(gateway)


async def test_a_body_that_is_not_sdp_is_refused(gateway: GatewayProcess) -> None:
    opened = await gateway.metric("duplex_sessions_opened_total")
    await refused(gateway, await post(gateway, "hello, gateway"), "invalid_sdp")
    await refused(gateway, await post(gateway, b"\xff\xfe\x00"), "invalid_sdp")
    assert await gateway.metric("duplex_sessions_opened_total") == opened


async def test_an_offer_the_stack_cannot_negotiate_is_refused(gateway: GatewayProcess) -> None:
    sdp = await offered_sdp()
    no_fingerprint = re.sub(r"a=fingerprint:[^\r\n]*\r?\n", "", sdp)
    await refused(gateway, await post(gateway, no_fingerprint), "invalid_sdp")
    for broken in (sdp.replace("m=audio ", "m=audio x", 1),  # each trips aiortc's parser
                   re.sub(r"a=ice-ufrag:[^\r\n]*\r?\n", "", sdp),
                   sdp.replace("a=setup:actpass", "a=setup:bogus")):
        await refused(gateway, await post(gateway, broken), "invalid_sdp")


async def test_an_oversized_offer_is_refused(gateway: GatewayProcess) -> None:
    sdp = await offered_sdp()
    padded = sdp + "".join(f"a=x-pad:{i:06d}{'x' * 100}\r\n" for i in range(400))  # ~44 KB
    await refused(gateway, await post(gateway, padded), "sdp_too_large")
    huge = "v=0\r\n" + "a=x\r\n" * 400_000  # over the whole body's limit too
    await refused(gateway, await post(gateway, huge), "sdp_too_large")


async def test_an_offer_without_opus_is_refused(gateway: GatewayProcess) -> None:
    sdp = re.sub(r"a=rtpmap:\d+ opus/48000/2\r?\n", "", await offered_sdp())
    await refused(gateway, await post(gateway, sdp), "unsupported_codec")


async def test_an_offer_without_the_events_channel_is_refused(gateway: GatewayProcess) -> None:
    await refused(gateway, await post(gateway, await offered_sdp(channel=False)),
                  "invalid_sdp")


async def test_other_bodies_are_refused(gateway: GatewayProcess) -> None:
    sdp = await offered_sdp()
    await refused(gateway, await post(gateway, sdp, "text/plain"), "invalid_sdp")
    async with httpx.AsyncClient(base_url=gateway.http, timeout=30.0) as http:
        bad_session = await http.post("/v1/realtime/calls", files={
            "sdp": (None, sdp), "session": (None, "{not json")})
        await refused(gateway, bad_session, "invalid_session")
        wrong_session = await http.post("/v1/realtime/calls", files={
            "sdp": (None, sdp), "session": (None, json.dumps({"instructions": 7}))})
        assert wrong_session.status_code == 400, wrong_session.text
        no_sdp = await http.post("/v1/realtime/calls", files={"session": (None, "{}")})
        await refused(gateway, no_sdp, "invalid_sdp")
    await nothing_left(gateway)


async def test_an_abandoned_offer_ends_its_session_after_the_ice_timeout(
        gateway: GatewayProcess) -> None:
    sdp = await offered_sdp()  # its peer connection is closed: ICE can never complete
    answer = await post(gateway, sdp)
    assert answer.status_code == 201, answer.text
    call_id = answer.headers["location"].rsplit("/", 1)[1]

    # the gateway logs the call's session before it answers, but this process reads
    # that log on a thread of its own: wait for the line, don't assume it was read
    async def logged() -> str | None:
        return next((line for line in gateway.output if call_id in line and "sess_" in line),
                    None)

    line = await eventually(logged, 30, "the call's session logged")
    sid = re.search(r"sess_[A-Za-z0-9_-]+", line).group(0)  # type: ignore[union-attr]
    r = valkey_of(gateway.data_dir)
    # the session was made (on a busy box its ICE timeout may already have ended it)
    assert (await meta(r, sid))["state"] in {"open", "closed", "expired"}

    async def ended() -> bool:
        return (await meta(r, sid)).get("state") != "open" and await gateway.metric(
            "duplex_webrtc_calls_active") == 0

    await eventually(ended, float(ICE_TIMEOUT_S) + 30, "the abandoned call's session ended")
    await nothing_left(gateway)
    await r.aclose()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(Path(tmp_path_factory.mktemp("keyed")), "--api-key", KEY) as proc:
        yield proc


async def test_the_key_is_required_as_on_the_websocket(keyed: GatewayProcess) -> None:
    sdp = await offered_sdp()
    refused_ = await post(keyed, sdp)
    assert refused_.status_code == 401
    assert refused_.json()["error"]["code"] == "invalid_api_key"
    await nothing_left(keyed)
    bearer = {"Authorization": f"Bearer {KEY}"}
    peer = await PeerClient.call(keyed.http, headers=bearer)
    try:
        assert (await peer.recv())["type"] == "session.created"
        async with httpx.AsyncClient(timeout=30.0) as http:
            anonymous = await http.delete(peer.call_url)  # a hang-up needs the key too
        assert anonymous.status_code == 401
        assert await peer.hang_up(bearer) == 204
    finally:
        await peer.close()
    await nothing_left(keyed)
