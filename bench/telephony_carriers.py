"""Each carrier's wire, as ``bench/telephony.py``'s callers speak it: one row each.

A row says how to answer a call (the webhook, signed as the carrier signs it, or
the credentials on the socket's upgrade where the carrier has no webhook), what
the stream's opening messages are, what audio the carrier carries (μ-law or
16-bit PCM, at its rate), how the caller's 20 ms of it goes in (a JSON text
message, or a bare binary frame), and how to read what the gateway sends back
(audio, a playback point to acknowledge, a clear). Adding a carrier is adding a
row to ``CARRIERS``.
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
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.audio import resample, ulaw_encode
from gateway.telephony.plivo import plivo_signature
from gateway.telephony.vonage import sign as vonage_jwt

PLIVO_AUTH_TOKEN = "bench-plivo-auth-token"
TELNYX_KEY = Ed25519PrivateKey.generate()
TELNYX_PUBLIC_KEY = base64.b64encode(
    TELNYX_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
VONAGE_SECRET = "bench-vonage-signature-secret"
EXOTEL_CREDENTIALS = "bench-key:bench-token"
# what the bench's gateway needs to turn the carriers' routes on
GATEWAY_FLAGS = ["--telnyx-public-key", TELNYX_PUBLIC_KEY, "--plivo-auth-token",
                 PLIVO_AUTH_TOKEN, "--vonage-signature-secret", VONAGE_SECRET,
                 "--exotel-credentials", EXOTEL_CREDENTIALS]

FRAME_S = 0.02
Frame = str | bytes  # a WebSocket message: text or binary
Message = dict[str, Any]


@dataclass(frozen=True)
class Audio:
    """The audio a carrier carries each way: μ-law (8 kHz) or 16-bit little-endian PCM."""

    ulaw: bool
    rate: int

    @property
    def bytes_per_s(self) -> int:
        return self.rate if self.ulaw else 2 * self.rate

    def frames(self, pcm_8k: np.ndarray) -> list[bytes]:
        """8 kHz 16-bit PCM in this encoding, cut into 20 ms frames."""
        pcm = resample(pcm_8k.astype(np.int16), 8000, self.rate)
        audio = (ulaw_encode(pcm) if self.ulaw else pcm.astype("<i2")).tobytes()
        step = int(self.bytes_per_s * FRAME_S)
        return [audio[i:i + step] for i in range(0, len(audio), step)]


ULAW_8K = Audio(ulaw=True, rate=8000)


@dataclass
class Stream:
    """One call's stream, as its carrier speaks it."""

    url: str
    opening: list[Frame]  # the messages before the caller's audio
    media: Callable[[bytes], Frame]  # 20 ms of the carrier's audio → a message
    ack: Callable[[str], Frame]  # a playback point → its acknowledgement
    headers: dict[str, str] = field(default_factory=dict)  # on the socket's upgrade
    hangup: Frame | None = None  # the carrier's end of call; None: it closes the socket


@dataclass(frozen=True)
class Heard:
    """What one message from the gateway means to the carrier."""

    audio: bytes = b""  # reply audio to play
    point: str | None = None  # a playback point to acknowledge once what came before played
    clear: bool = False  # drop what is buffered


@dataclass(frozen=True)
class Carrier:
    name: str
    audio: Audio
    dial: Callable[[str, str], Awaitable[Stream]]  # (http base, instructions) → stream
    read: Callable[[Frame], Heard]


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
    xml = await _post(f"{base}/v1/twilio/voice?instructions={quote(instructions)}",
                      urlencode({"CallSid": call}).encode(), {})
    msg = _twilio_like("streamSid", sid, seq)
    start = msg("start", start={"streamSid": sid, "callSid": call, "tracks": ["inbound"],
                                "customParameters": _params(xml), "mediaFormat": {
                                    "encoding": "audio/x-mulaw", "sampleRate": 8000,
                                    "channels": 1}})
    return Stream(_attr(xml, "url"), [json.dumps({"event": "connected"}), start],
                  lambda f: msg("media", media={"track": "inbound", "payload": _b64(f)}),
                  lambda name: msg("mark", mark={"name": name}),
                  hangup=msg("stop", stop={"callSid": call}))


async def telnyx(base: str, instructions: str) -> Stream:
    call, sid, seq = "v3:" + secrets.token_urlsafe(20), str(uuid.uuid4()), [0]
    body, ts = urlencode({"CallSid": call}).encode(), str(int(time.time()))
    signature = _b64(TELNYX_KEY.sign(ts.encode() + b"|" + body))
    xml = await _post(f"{base}/v1/telnyx/voice?instructions={quote(instructions)}", body, {
        "telnyx-signature-ed25519": signature, "telnyx-timestamp": ts})
    msg = _twilio_like("stream_id", sid, seq)
    start = msg("start", start={"call_control_id": call, "custom_parameters": _params(xml),
                                "media_format": {"encoding": "PCMU", "sample_rate": 8000,
                                                 "channels": 1}})
    return Stream(_attr(xml, "url"), [json.dumps({"event": "connected"}), start],
                  lambda f: msg("media", media={"track": "inbound", "payload": _b64(f)}),
                  lambda name: msg("mark", mark={"name": name}), hangup=msg("stop", stop={}))


async def plivo(base: str, instructions: str) -> Stream:
    call, sid = str(uuid.uuid4()), str(uuid.uuid4())
    url = f"{base}/v1/plivo/answer?instructions={quote(instructions)}"
    form, nonce = {"CallUUID": call}, str(secrets.randbelow(10**12))
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
                                           "name": name}))  # Plivo hangs up by closing


async def vonage(base: str, instructions: str) -> Stream:
    """The signed answer (GET, a JWT over the empty body), its NCCO's endpoint, then
    ``websocket:connected`` with the endpoint's headers; audio is bare binary frames."""
    call = str(uuid.uuid4())
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"{base}/v1/vonage/answer", params={
            "uuid": call, "instructions": instructions}, headers={
            "Authorization": "Bearer " + vonage_jwt(VONAGE_SECRET, b"", time.time())})
    resp.raise_for_status()
    endpoint = resp.json()[0]["endpoint"][0]
    connected = json.dumps({"event": "websocket:connected",
                            "content-type": endpoint["content-type"], **endpoint["headers"]})
    return Stream(endpoint["uri"], [connected], lambda f: f,
                  lambda name: json.dumps({"event": "websocket:notify",
                                           "payload": {"name": name}}))


async def exotel(base: str, instructions: str) -> Stream:
    """No webhook: the applet's fixed URL with Basic auth on the upgrade; the
    instructions ride in ``start``'s custom parameters."""
    sid, seq = secrets.token_hex(16), [0]

    def msg(event: str, **body: object) -> str:
        seq[0] += 1
        return json.dumps({"event": event, "sequence_number": str(seq[0]), "stream_sid": sid,
                           **body})

    start = msg("start", start={"stream_sid": sid, "call_sid": secrets.token_hex(16),
                                "custom_parameters": {"instructions": instructions},
                                "media_format": {"encoding": "audio/x-raw",
                                                 "sample_rate": "8000", "bit_rate": "16"}})
    return Stream(base.replace("http", "ws", 1) + "/v1/exotel/media-stream",
                  [json.dumps({"event": "connected"}), start],
                  lambda f: msg("media", media={"payload": _b64(f)}),
                  lambda name: msg("mark", mark={"name": name}),
                  {"Authorization": "Basic " + _b64(EXOTEL_CREDENTIALS.encode())},
                  msg("stop", stop={"reason": "callended"}))


def _json(frame: Frame) -> Message:
    msg = json.loads(frame)
    return msg if isinstance(msg, dict) else {}


def _events(media: str, point: str, clear: str) -> Callable[[Frame], Heard]:
    """A reader for carriers whose every message is JSON with an ``event`` name."""
    def read(frame: Frame) -> Heard:
        msg = _json(frame)
        event = msg.get("event")
        if event == media:
            return Heard(audio=base64.b64decode(msg["media"]["payload"]))
        if event == point:  # Twilio-like {"mark": {"name"}}, Plivo's bare {"name"}
            return Heard(point=msg.get(point, msg)["name"])
        return Heard(clear=event == clear)
    return read


def _vonage_read(frame: Frame) -> Heard:
    if isinstance(frame, bytes):
        return Heard(audio=frame)
    msg = _json(frame)
    if msg.get("action") == "notify":
        return Heard(point=msg["payload"]["name"])
    return Heard(clear=msg.get("action") == "clear")


CARRIERS = [
    Carrier("twilio", ULAW_8K, twilio, _events("media", "mark", "clear")),
    Carrier("telnyx", ULAW_8K, telnyx, _events("media", "mark", "clear")),
    Carrier("plivo", ULAW_8K, plivo, _events("playAudio", "checkpoint", "clearAudio")),
    Carrier("vonage", Audio(ulaw=False, rate=16000), vonage, _vonage_read),
    Carrier("exotel", Audio(ulaw=False, rate=8000), exotel, _events("media", "mark", "clear")),
]
