"""Each carrier's wire, as ``bench/telephony.py``'s latency probe speaks it: one row each.

A row says how to answer a call (the webhook, signed as the carrier signs it),
what the stream's opening messages are, how a caller's 20 ms of μ-law goes in,
and how to read what the gateway sends back (audio, a playback point to
acknowledge, a clear). Adding a carrier is adding a row to ``CARRIERS``.
"""

from __future__ import annotations

import base64
import html
import json
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.telephony.plivo import plivo_signature

PLIVO_AUTH_TOKEN = "bench-plivo-auth-token"
TELNYX_KEY = Ed25519PrivateKey.generate()
TELNYX_PUBLIC_KEY = base64.b64encode(
    TELNYX_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
# what the bench's gateway needs to turn the carriers' routes on
GATEWAY_FLAGS = ["--telnyx-public-key", TELNYX_PUBLIC_KEY, "--plivo-auth-token",
                 PLIVO_AUTH_TOKEN]

Message = dict[str, Any]


@dataclass
class Stream:
    """One call's stream, as its carrier speaks it."""

    url: str
    opening: list[str]  # the messages before the caller's audio
    media: Callable[[bytes], str]  # 20 ms of μ-law → a message
    ack: Callable[[str], str | None]  # a playback point → its acknowledgement


@dataclass(frozen=True)
class Carrier:
    name: str
    dial: Callable[[str, str], Awaitable[Stream]]  # (http base, instructions) → stream
    audio: Callable[[Message], bytes | None]  # reply audio in a message, if any
    point: Callable[[Message], str | None]  # a playback point to acknowledge, if any
    clear: str  # the event that clears the carrier's buffer


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _attr(xml: str, name: str) -> str:
    found = re.search(rf'{name}="([^"]*)"', xml)
    assert found is not None, xml
    return html.unescape(found.group(1))


def _params(xml: str) -> dict[str, str]:
    return {html.unescape(k): html.unescape(v) for k, v in
            re.findall(r'<Parameter name="([^"]*)" value="([^"]*)"/>', xml)}


async def _post(url: str, body: bytes, headers: dict[str, str]) -> str:
    async with httpx.AsyncClient() as http:
        resp = await http.post(url, content=body, headers={
            "content-type": "application/x-www-form-urlencoded", **headers})
    resp.raise_for_status()
    return resp.text


def _twilio_like(stream_key: str, sid: str, seq: list[int]) -> Callable[..., str]:
    def message(event: str, **body: object) -> str:
        seq[0] += 1
        return json.dumps({"event": event, "sequenceNumber": str(seq[0]), stream_key: sid,
                           **body})
    return message


async def twilio(base: str, instructions: str) -> Stream:
    call, sid, seq = "CA" + secrets.token_hex(16), "MZ" + secrets.token_hex(16), [0]
    xml = await _post(f"{base}/v1/twilio/voice?instructions={instructions}",
                      urlencode({"CallSid": call}).encode(), {})
    msg = _twilio_like("streamSid", sid, seq)
    start = msg("start", start={"streamSid": sid, "callSid": call, "tracks": ["inbound"],
                                "customParameters": _params(xml), "mediaFormat": {
                                    "encoding": "audio/x-mulaw", "sampleRate": 8000,
                                    "channels": 1}})
    return Stream(_attr(xml, "url"), [json.dumps({"event": "connected"}), start],
                  lambda f: msg("media", media={"track": "inbound", "payload": _b64(f)}),
                  lambda name: msg("mark", mark={"name": name}))


async def telnyx(base: str, instructions: str) -> Stream:
    call, sid, seq = "v3:" + secrets.token_urlsafe(20), str(uuid.uuid4()), [0]
    body, ts = urlencode({"CallSid": call}).encode(), str(int(time.time()))
    signature = _b64(TELNYX_KEY.sign(ts.encode() + b"|" + body))
    xml = await _post(f"{base}/v1/telnyx/voice?instructions={instructions}", body, {
        "telnyx-signature-ed25519": signature, "telnyx-timestamp": ts})
    msg = _twilio_like("stream_id", sid, seq)
    start = msg("start", start={"call_control_id": call, "custom_parameters": _params(xml),
                                "media_format": {"encoding": "PCMU", "sample_rate": 8000,
                                                 "channels": 1}})
    return Stream(_attr(xml, "url"), [json.dumps({"event": "connected"}), start],
                  lambda f: msg("media", media={"track": "inbound", "payload": _b64(f)}),
                  lambda name: msg("mark", mark={"name": name}))


async def plivo(base: str, instructions: str) -> Stream:
    call, sid = str(uuid.uuid4()), str(uuid.uuid4())
    url, form = f"{base}/v1/plivo/answer?instructions={instructions}", {"CallUUID": call}
    nonce = str(secrets.randbelow(10**12))
    xml = await _post(url, urlencode(form).encode(), {
        "X-Plivo-Signature-V3": plivo_signature(PLIVO_AUTH_TOKEN, url, nonce, form.items()),
        "X-Plivo-Signature-V3-Nonce": nonce})
    stream_url = re.search(r">(wss?://[^<]*)</Stream>", xml)
    assert stream_url is not None, xml
    start = json.dumps({"event": "start", "sequenceNumber": 1, "start": {
        "callId": call, "streamId": sid, "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}},
        "extra_headers": _attr(xml, "extraHeaders").replace(",", ";")})
    return Stream(html.unescape(stream_url.group(1)), [start],
                  lambda f: json.dumps({"event": "media", "streamId": sid, "media": {
                      "track": "inbound", "payload": _b64(f)}}),
                  lambda name: json.dumps({"event": "playedStream", "streamId": sid,
                                           "name": name}))


def _media_payload(msg: Message) -> bytes | None:
    if msg.get("event") == "media":
        return base64.b64decode(msg["media"]["payload"])
    return None


CARRIERS = [
    Carrier("twilio", twilio, _media_payload,
            lambda m: m["mark"]["name"] if m.get("event") == "mark" else None, "clear"),
    Carrier("telnyx", telnyx, _media_payload,
            lambda m: m["mark"]["name"] if m.get("event") == "mark" else None, "clear"),
    Carrier("plivo", plivo,
            lambda m: base64.b64decode(m["media"]["payload"])
            if m.get("event") == "playAudio" else None,
            lambda m: m["name"] if m.get("event") == "checkpoint" else None, "clearAudio"),
]
