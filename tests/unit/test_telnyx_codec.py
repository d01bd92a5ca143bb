"""Telnyx's codec and signatures without I/O: nothing Telnyx sends raises or ends the
call but ``stop``; the marks round-trip into the truncate of a barge-in; L16 is
converted both ways; the Ed25519 check holds only for Telnyx's own signature."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from carrier_codec_checks import (
    LIMIT,
    SPEECH_STARTED,
    check_barge_in,
    check_parses,
    media_payloads,
    message_bodies,
    rendered_each,
    reply_delta,
)
from codec_strategies import json_values, server_events
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hostile import strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from gateway.session.attachment import outbound
from gateway.telephony.telnyx_codec import TelnyxCodec
from gateway.telephony.telnyx_signature import TOLERANCE_S, public_key, signature_ok
from gateway.transports.codec import (
    QUIET,
    Hangup,
    Hello,
    Ignore,
    Inbound,
    Keypress,
    Refuse,
    StreamStart,
)

SID = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC"
CALL = "v3:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"
PARAMS = {"call": "CA-from-texml", "token": "t"}


def start_message(encoding: str = "PCMU", rate: int = 8000) -> dict[str, Any]:
    return {"event": "start", "sequence_number": "1", "stream_id": SID, "start": {
        "user_id": "3E6F995F-85F7-4705-9741-53B116D28237", "call_control_id": CALL,
        "from": "+13122010094", "to": "+13122123456", "custom_parameters": PARAMS,
        "media_format": {"encoding": encoding, "sample_rate": rate, "channels": 1}}}


EVENTS = ["connected", "start", "media", "mark", "dtmf", "stop", "error", "clear", "x"]


@st.composite
def telnyx_messages(draw: st.DrawFn) -> str:
    """Messages shaped like Telnyx's, each part possibly wrong."""
    event = draw(st.sampled_from(EVENTS) | st.text(max_size=10))
    body = draw(message_bodies(
        track=st.sampled_from(["inbound", "outbound"]) | json_values, payload=media_payloads,
        name=st.text(max_size=30) | json_values, digit=st.text(max_size=3) | json_values))
    return json.dumps({"event": event, event: body, "sequence_number": "2",
                       "stream_id": draw(st.sampled_from([SID, "other"]) | json_values)})


def started(encoding: str = "PCMU", rate: int = 8000) -> TelnyxCodec:
    codec = TelnyxCodec(LIMIT)
    assert isinstance(codec.parse(json.dumps(start_message(encoding, rate))), StreamStart)
    return codec


FRAMES = st.one_of(st.text(), st.binary(max_size=64), strategy(), telnyx_messages())


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAMES, max_size=8), st.sampled_from([None, "PCMU", "PCMA", "L16"]))
def test_nothing_telnyx_sends_raises_or_ends_the_call_but_stop(
        frames: list[str | bytes], encoding: str | None) -> None:
    codec = TelnyxCodec(LIMIT) if encoding is None else started(
        encoding, 16000 if encoding == "L16" else 8000)
    check_parses(codec, frames, encoding is not None, "stop")


def test_the_start_says_which_call_in_which_format() -> None:
    codec = TelnyxCodec(LIMIT)
    assert codec.parse(json.dumps({"event": "connected", "version": "1.0.0"})) == Hello()
    assert codec.parse(json.dumps({"event": "stop"})) == QUIET  # not started: not ours
    assert codec.parse(json.dumps(start_message())) == StreamStart(
        SID, "CA-from-texml", PARAMS, "audio/pcmu")
    assert codec.parse(json.dumps({"event": "stop", "stream_id": SID})) == Hangup("telnyx_stop")
    assert TelnyxCodec(LIMIT).parse(json.dumps(start_message("PCMA"))).audio_format \
        == "audio/pcma"  # type: ignore[union-attr]
    assert TelnyxCodec(LIMIT).parse(json.dumps(start_message("L16", 16000))).audio_format \
        == "audio/pcm"  # type: ignore[union-attr]
    for encoding, rate in (("OPUS", 16000), ("PCMU", 16000), ("L16", 24000)):
        refused = TelnyxCodec(LIMIT).parse(json.dumps(start_message(encoding, rate)))
        assert isinstance(refused, Refuse) and "unsupported media format" in refused.why
    assert isinstance(TelnyxCodec(LIMIT).parse('{"event": "start"}'), Refuse)


def test_without_our_call_parameter_the_call_control_id_names_the_call() -> None:
    message = start_message()
    message["start"]["custom_parameters"] = {"token": "t"}
    start = TelnyxCodec(LIMIT).parse(json.dumps(message))
    assert isinstance(start, StreamStart) and start.call_id == CALL


def test_media_dtmf_and_errors_once_started() -> None:
    codec = started()
    media = {"event": "media", "stream_id": SID, "media": {
        "track": "inbound", "chunk": "2", "timestamp": "5", "payload": "AAEC"}}
    assert codec.parse(json.dumps(media)) == c.AppendAudio(None, b"\0\1\2")
    ours = {**media, "media": {**media["media"], "track": "outbound"}}
    assert codec.parse(json.dumps(ours)) == QUIET
    dtmf = {"event": "dtmf", "stream_id": SID, "dtmf": {"digit": "7"}}
    assert codec.parse(json.dumps(dtmf)) == Keypress("7")
    error = {"event": "error", "stream_id": SID, "payload": {"code": 100002, "title": "x"}}
    assert isinstance(codec.parse(json.dumps(error)), Ignore)
    other = {**media, "stream_id": "other"}
    assert codec.parse(json.dumps(other)) == Ignore("stream_id", "'media' for another stream")


def test_l16_is_big_endian_on_the_wire_and_24_khz_in_the_session() -> None:
    codec = started("L16", 16000)
    t = np.arange(16000) / 16000
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    got = bytearray()
    for i in range(0, tone.size, 320):  # 20 ms frames
        media = {"event": "media", "stream_id": SID, "media": {
            "track": "inbound", "payload": base64.b64encode(tone[i:i + 320].astype(">i2")
                                                            .tobytes()).decode()}}
        parsed = codec.parse(json.dumps(media))
        assert isinstance(parsed, c.AppendAudio)
        got += parsed.audio
    pcm = np.frombuffer(bytes(got), dtype="<i2")
    assert abs(pcm.size - 24000) < 200  # 1 s at 24 kHz
    assert np.abs(pcm).max() == pytest.approx(8000, rel=0.05)  # not byte-swapped noise
    reply = np.zeros(480, dtype="<i2")  # 20 ms at 24 kHz
    frames = codec.render(outbound({"type": "response.output_audio.delta",
                                    "response_id": "r", "item_id": "i",
                                    "delta": base64.b64encode(reply.tobytes()).decode()}))
    media_out = json.loads(frames.frames[0])["media"]["payload"]
    sent = len(base64.b64decode(media_out))
    assert abs(sent - 640) <= 8  # ~20 ms at 16 kHz (the resampler holds a few samples)
    # the mark counts what went out, as Telnyx will play it: 32 bytes a ms
    assert json.loads(frames.frames[1])["mark"]["name"] == f"r:{sent / 32:.3f}"


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(server_events(), st.booleans()), max_size=12))
def test_any_event_sequence_renders_to_telnyx_messages(
        events: list[tuple[dict[str, Any], bool]]) -> None:
    for _, rendered in rendered_each(started(), events):
        for frame in rendered.frames:
            assert isinstance(frame, str)
            assert json.loads(frame)["event"] in ("media", "mark", "clear")
        if rendered.answer is not None:
            assert isinstance(rendered.answer, c.TruncateItem)
            assert rendered.frames == (json.dumps({"event": "clear"}),)


def _echo(codec: TelnyxCodec, mark: str) -> Inbound:
    name = json.loads(mark)["mark"]["name"]
    echo = {"event": "mark", "stream_id": SID, "mark": {"name": name}}
    return codec.parse(json.dumps(echo))


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=10), st.data())
def test_a_barge_in_truncates_at_the_last_mark_echoed_before_the_clear(
        chunks: list[int], data: st.DataObject) -> None:
    codec = started()
    marks = [codec.render(reply_delta("resp_a", n)).frames[1] for n in chunks]
    heard = data.draw(st.integers(0, len(chunks)))
    # PCMU: 8 bytes a ms
    rendered = check_barge_in(codec, marks, chunks, heard, lambda m: _echo(codec, m), 8)
    if rendered.answer is None:  # all of it played
        return
    for mark in marks[heard:]:  # pending marks echoed on the clear: flushed, not heard
        assert _echo(codec, mark) == QUIET
    assert codec.render(SPEECH_STARTED).answer is None


# -- the webhook's Ed25519 signature -----------------------------------------------------

PRIVATE = Ed25519PrivateKey.generate()
PUBLIC = base64.b64encode(PRIVATE.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
                          ).decode()


def sign(body: bytes, timestamp: str) -> str:
    return base64.b64encode(PRIVATE.sign(timestamp.encode() + b"|" + body)).decode()


def test_only_telnyx_s_fresh_signature_of_this_body_holds() -> None:
    key, body, now = public_key(PUBLIC), b"CallSid=v3%3Aabc&From=%2B1555", 1_700_000_000.0
    ts = str(int(now))
    assert signature_ok(key, body, ts, sign(body, ts), now)
    assert not signature_ok(key, body + b"&x=1", ts, sign(body, ts), now)  # body changed
    assert not signature_ok(key, body, str(int(now) - 1), sign(body, ts), now)  # ts changed
    stale = str(int(now) - TOLERANCE_S - 1)
    assert not signature_ok(key, body, stale, sign(body, stale), now)  # a replay
    other = Ed25519PrivateKey.generate()
    forged = base64.b64encode(other.sign(ts.encode() + b"|" + body)).decode()
    assert not signature_ok(key, body, ts, forged, now)
    for ts_bad, sig_bad in ((None, sign(body, ts)), (ts, None), ("x", "y"), (ts, "%%%")):
        assert not signature_ok(key, body, ts_bad, sig_bad, now)


def test_a_public_key_must_be_32_bytes_of_base64() -> None:
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(ValueError):
            public_key(bad)
