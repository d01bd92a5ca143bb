"""Every door of a real gateway process (docs/deployment.md "Security"): the API key on
``/v1/realtime``, ``/metrics`` and ``/readyz``, the Twilio routes without a Twilio
auth token, browser origins, and one answer to every refused resume."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from client import RealtimeClient, expect_error, last_seq, resume, still_works
from gateway_process import GatewayProcess, running_tone
from websockets.exceptions import InvalidStatus

KEY = "dg-test-" + secrets.token_hex(16)
BEARER = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A key and no Twilio auth token: the Twilio routes are off."""
    with running_tone(tmp_path_factory.mktemp("keyed"), "--api-key", KEY) as proc:
        yield proc


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("listed"),
                      "--allowed-origins", "https://app.example, http://dev.example:*") as proc:
        yield proc


async def opened(gateway: GatewayProcess) -> float:
    """Sessions this gateway has opened so far (its metric)."""
    async with httpx.AsyncClient(timeout=5.0) as http:
        text = (await http.get(f"{gateway.http}/metrics", headers=BEARER)).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("duplex_sessions_opened_total "))


async def refused(c: RealtimeClient, code: str) -> dict[str, Any]:
    """One ``error`` with ``code``, then a 1008 close, and never a session."""
    try:
        error = await expect_error(c, code)
        await asyncio.wait_for(c.ws.wait_closed(), 5)
        assert c.ws.close_code == 1008
        assert not c.of("session.created")
        return error
    finally:
        await c.close()


# -- the API key on HTTP ------------------------------------------------------------------


@pytest.mark.parametrize("how", [
    pytest.param({}, id="no_key"),
    pytest.param({"headers": {"Authorization": "Bearer wrong"}}, id="wrong_key"),
    pytest.param({"params": {"api_key": KEY}}, id="key_in_the_url"),
])
async def test_metrics_need_the_key(keyed: GatewayProcess, how: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=keyed.http, timeout=5.0) as http:
        refusal = await http.get("/metrics", **how)
        allowed = await http.get("/metrics", headers=BEARER)
    assert refusal.status_code == 401
    assert refusal.headers["www-authenticate"] == "Bearer"
    assert "duplex_" not in refusal.text
    assert allowed.status_code == 200
    assert "duplex_sessions_active" in allowed.text


async def test_readyz_shows_no_ids_without_the_key(keyed: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=keyed.http, timeout=5.0) as http:
        anonymous = await http.get("/readyz", headers={"Authorization": "Bearer wrong"})
        full = await http.get("/readyz", headers=BEARER)
        health = await http.get("/healthz")  # a supervisor's probe needs no key
    assert anonymous.status_code == 200
    assert anonymous.json() == {"ready": True}
    assert full.json()["owner"] and full.json()["advertised"] and full.json()["plugin"] == "tone"
    assert health.status_code == 200


async def test_without_a_key_readyz_and_metrics_stay_open(gateway: GatewayProcess) -> None:
    assert await gateway.owner()
    assert await gateway.metric("duplex_sessions_active") >= 0


# -- the API key on the realtime socket -------------------------------------------------


async def test_a_key_in_the_url_is_refused_and_says_why(keyed: GatewayProcess) -> None:
    before = await opened(keyed)
    c = await RealtimeClient.connect(f"{keyed.ws}?api_key={KEY}")
    error = await refused(c, "invalid_api_key")
    assert "URL" in error["error"]["message"]
    assert await opened(keyed) == before


async def test_the_openai_client_style_bearer_still_opens_a_session(
        keyed: GatewayProcess) -> None:
    c = await RealtimeClient.connect(keyed.ws, additional_headers=BEARER)
    try:
        assert (await c.recv())["type"] == "session.created"
        await still_works(c)
    finally:
        await c.close()


# -- Twilio without a Twilio auth token ---------------------------------------------------


async def test_twilio_routes_are_off_with_a_key_and_no_twilio_token(
        keyed: GatewayProcess) -> None:
    form = {"CallSid": "CA" + "1" * 32}
    async with httpx.AsyncClient(base_url=keyed.http, timeout=5.0) as http:
        webhook = await http.post("/v1/twilio/voice", data=form, headers=BEARER)
    assert webhook.status_code == 404
    assert "<Response>" not in webhook.text
    stream_url = keyed.ws.replace("/v1/realtime", "/v1/twilio/media-stream")
    with pytest.raises(InvalidStatus) as refusal:
        await websockets.connect(stream_url, additional_headers=BEARER)
    assert refusal.value.response.status_code == 403
    # the operator is told at startup why, and how to turn them on
    said = [line for line in keyed.output if "Twilio routes" in line]
    assert said and "--twilio-auth-token" in said[0] and "off" in said[0]


async def test_twilio_routes_stay_on_without_a_key(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.http, timeout=5.0) as http:
        webhook = await http.post("/v1/twilio/voice", data={"CallSid": "CA" + "2" * 32})
    assert webhook.status_code == 200
    assert "<Connect><Stream" in webhook.text
    assert not any("Twilio routes" in line for line in gateway.output)


# -- browser origins ------------------------------------------------------------------------


@pytest.mark.parametrize("origin", [
    None,  # not a browser
    "http://localhost:5173",
    "https://localhost",
    "http://127.0.0.1:9",
    "http://[::1]:8080",
    "own",  # the page this gateway serves
])
async def test_default_origins_are_the_gateway_itself_and_localhost(
        gateway: GatewayProcess, origin: str | None) -> None:
    if origin == "own":
        origin = gateway.http
    headers = {} if origin is None else {"Origin": origin}
    c = await RealtimeClient.connect(gateway.ws, additional_headers=headers)
    try:
        assert (await c.recv())["type"] == "session.created"
    finally:
        await c.close()


@pytest.mark.parametrize("origin", [
    "https://evil.example",
    "http://localhost.evil.example",
    "null",  # a file:// page or a sandboxed frame
    "http://127.0.0.1.evil.example:80",
])
async def test_other_origins_are_refused_before_any_session(gateway: GatewayProcess,
                                                            origin: str) -> None:
    before = await opened(gateway)
    c = await RealtimeClient.connect(gateway.ws, additional_headers={"Origin": origin})
    error = await refused(c, "origin_not_allowed")
    assert "--allowed-origins" in error["error"]["message"]
    assert await opened(gateway) == before


async def test_a_refused_origin_cannot_open_a_twilio_stream(gateway: GatewayProcess) -> None:
    stream_url = gateway.ws.replace("/v1/realtime", "/v1/twilio/media-stream")
    ws = await websockets.connect(stream_url,
                                  additional_headers={"Origin": "https://evil.example"})
    await asyncio.wait_for(ws.wait_closed(), 5)
    assert ws.close_code == 1008


@pytest.mark.parametrize(("origin", "allowed"), [
    ("https://app.example", True),
    ("https://app.example:443", True),
    ("http://app.example", False),  # another scheme is another origin
    ("http://dev.example:3000", True),
    ("http://localhost:5173", False),  # a list replaces the localhost default
    ("own", True),  # ... but never the gateway's own page
])
async def test_allowed_origins_list(listed: GatewayProcess, origin: str, allowed: bool) -> None:
    if origin == "own":
        origin = listed.http
    c = await RealtimeClient.connect(listed.ws, additional_headers={"Origin": origin})
    if not allowed:
        await refused(c, "origin_not_allowed")
        return
    try:
        assert (await c.recv())["type"] == "session.created"
    finally:
        await c.close()


async def test_a_browser_with_the_key_subprotocol_passes_both_checks(
        keyed: GatewayProcess) -> None:
    c = await RealtimeClient.connect(
        keyed.ws, subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"],
        additional_headers={"Origin": "http://localhost:3000"})
    try:
        assert c.ws.subprotocol == "realtime"
        assert (await c.recv())["type"] == "session.created"
    finally:
        await c.close()
    evil = await RealtimeClient.connect(
        keyed.ws, subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"],
        additional_headers={"Origin": "https://evil.example"})
    await refused(evil, "origin_not_allowed")  # the key does not make any page welcome


# -- one answer to a refused resume -----------------------------------------------------


async def refusal_of(c: RealtimeClient) -> tuple[dict[str, Any], int | None, str]:
    """The error, close code and close reason a refused resume got."""
    try:
        error = await c.until("error", 5)
        await asyncio.wait_for(c.ws.wait_closed(), 5)
        return error["error"], c.ws.close_code, c.ws.close_reason
    finally:
        await c.close()


async def test_an_unknown_session_and_a_wrong_token_get_the_same_answer(
        gateway: GatewayProcess) -> None:
    live = await RealtimeClient.connect(gateway.ws)
    created = await live.recv()
    sid, token = created["session"]["id"], created["resume_token"]
    ended = await RealtimeClient.connect(gateway.ws)
    gone = await ended.recv()
    await ended.send("session.close")
    await ended.until("session.closed")
    await ended.close()
    try:
        wrong_token = await refusal_of(await resume(gateway.ws, sid, "x" * 43, 0))
        unknown = await refusal_of(await resume(gateway.ws, "sess_" + "a" * 24, token, 0))
        closed = await refusal_of(await resume(gateway.ws, gone["session"]["id"],
                                               gone["resume_token"], 0))
        assert wrong_token == unknown == closed
        error, code, _ = unknown
        assert (error["code"], error["type"], error["param"], code) == (
            "session_resume_expired", "invalid_request_error", None, 1008)
        assert "resume_token" in error["message"]
        await still_works(live)  # the refused guess did nothing to the session
        assert last_seq(live.events) >= 1
    finally:
        await live.close()
