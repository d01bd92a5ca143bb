"""Plivo's codec and signature V3 without I/O: nothing Plivo sends raises or ends the
call (only a normal close does); checkpoints round-trip into the truncate of a
barge-in; the stream token survives ``extraHeaders``' alphabet."""

from __future__ import annotations

import json
from typing import Any

from carrier_codec_checks import (
    LIMIT,
    check_barge_in,
    check_parses,
    media_payloads,
    message_bodies,
    rendered_each,
    reply_delta,
)
from codec_strategies import json_values, server_events
from hostile import strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from gateway.telephony.plivo import plivo_signature, signature_base, signature_ok
from gateway.telephony.plivo_codec import PlivoCodec, extra_headers, stream_parameters
from gateway.telephony.tokens import mint_stream_token, stream_token_ok
from gateway.transports.codec import (
    QUIET,
    Ignore,
    Keypress,
    Refuse,
    StreamStart,
)

SID = "87654321-4321-4321-4321-cba987654321"
CALL = "12345678-1234-1234-1234-123456789abc"
START = {"event": "start", "sequenceNumber": 1, "start": {
    "callId": CALL, "streamId": SID, "accountId": "MAXXXXXXXXXXXXXXXXXX", "tracks": ["inbound"],
    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}},
    "extra_headers": "tokenexpires=1700000000;tokenmac=abc"}
EVENTS = ["start", "media", "dtmf", "playedStream", "clearedAudio", "stop", "x"]


@st.composite
def plivo_messages(draw: st.DrawFn) -> str:
    """Messages shaped like Plivo's, each part possibly wrong."""
    event = draw(st.sampled_from(EVENTS) | st.text(max_size=10))
    body = draw(message_bodies(
        track=st.sampled_from(["inbound", "outbound"]) | json_values, payload=media_payloads,
        digit=st.text(max_size=3) | json_values))
    message = {"event": event, event: body, "sequenceNumber": 2,
               "name": draw(st.text(max_size=30) | json_values)}
    if draw(st.booleans()):
        message["streamId"] = draw(st.sampled_from([SID, "other"]) | json_values)
    return json.dumps(message)


def started() -> PlivoCodec:
    codec = PlivoCodec(LIMIT, "be brief")
    assert isinstance(codec.parse(json.dumps(START)), StreamStart)
    return codec


FRAMES = st.one_of(st.text(), st.binary(max_size=64), strategy(), plivo_messages())


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAMES, max_size=8), st.booleans())
def test_no_message_plivo_sends_raises_or_ends_the_call(
        frames: list[str | bytes], start: bool) -> None:
    check_parses(started() if start else PlivoCodec(LIMIT), frames, start, None)


def test_only_a_normal_close_is_the_hang_up() -> None:
    assert PlivoCodec(LIMIT).ends_session(1000) == "plivo_hangup"
    for code in (1001, 1006, 1011, 4000):
        assert PlivoCodec(LIMIT).ends_session(code) is None


def test_the_start_carries_the_call_and_our_extra_headers() -> None:
    codec = PlivoCodec(LIMIT, "be brief")
    assert codec.parse(json.dumps({"event": "media", "media": {}})) == QUIET
    assert codec.parse(json.dumps(START)) == StreamStart(
        SID, CALL, {"token": "1700000000.abc", "instructions": "be brief"}, "audio/pcmu")
    bad = {**START, "start": {**START["start"], "mediaFormat": {"encoding": "audio/x-l16",
                                                                "sampleRate": 16000}}}
    refused = PlivoCodec(LIMIT).parse(json.dumps(bad))
    assert isinstance(refused, Refuse) and "unsupported media format" in refused.why
    assert isinstance(PlivoCodec(LIMIT).parse('{"event": "start"}'), Refuse)


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.text(min_size=1, max_size=60), st.booleans())
def test_the_token_and_instructions_survive_extra_headers(instructions: str,
                                                          override: bool) -> None:
    secret = b"k" * 32
    effective = instructions if override else "the default"
    token = mint_stream_token(secret, CALL, effective, 2_000_000_000)
    headers = extra_headers(token, instructions if override else None)
    pairs = [part.split("=") for part in headers.split(",")]
    assert all(k.isalnum() and v.isalnum() for k, v in pairs)  # Plivo's alphabet
    for sep in (",", ";"):  # Plivo's XML and its start example
        params = stream_parameters(headers.replace(",", sep), "the default")
        assert params["instructions"] == effective
        assert stream_token_ok(secret, params["token"], CALL, params["instructions"], 0)


def test_media_dtmf_and_acks_once_started() -> None:
    codec = started()
    media = {"event": "media", "sequenceNumber": 2, "streamId": SID,
             "media": {"track": "inbound", "timestamp": "1", "chunk": 1, "payload": "AAEC"}}
    assert codec.parse(json.dumps(media)) == c.AppendAudio(None, b"\0\1\2")
    dtmf = {"event": "dtmf", "streamId": SID, "dtmf": {"track": "inbound", "digit": "5"}}
    assert codec.parse(json.dumps(dtmf)) == Keypress("5")
    assert codec.parse(json.dumps({"event": "clearedAudio", "streamId": SID})) == QUIET
    other = {**media, "streamId": "other"}
    assert codec.parse(json.dumps(other)) == Ignore("stream_id", "'media' for another stream")


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(server_events(), st.booleans()), max_size=12))
def test_any_event_sequence_renders_to_plivo_messages(
        events: list[tuple[dict[str, Any], bool]]) -> None:
    for _, rendered in rendered_each(started(), events):
        for frame in rendered.frames:
            assert isinstance(frame, str)
            assert json.loads(frame)["event"] in ("playAudio", "checkpoint", "clearAudio")
        if rendered.answer is not None:
            assert isinstance(rendered.answer, c.TruncateItem)
            assert rendered.frames == (json.dumps({"event": "clearAudio", "streamId": SID}),)


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=10), st.data())
def test_a_barge_in_truncates_at_the_last_checkpoint_played(
        chunks: list[int], data: st.DataObject) -> None:
    codec = started()
    rendered = [codec.render(reply_delta("resp_a", n)).frames for n in chunks]
    play = json.loads(rendered[0][0])
    assert play["media"]["contentType"] == "audio/x-mulaw" and play["media"]["sampleRate"] == 8000
    checkpoints = [json.loads(frames[1])["name"] for frames in rendered]
    heard = data.draw(st.integers(0, len(chunks)))
    check_barge_in(codec, checkpoints, chunks, heard, lambda name: codec.parse(json.dumps(
        {"event": "playedStream", "streamId": SID, "name": name})), 8)  # μ-law: 8 bytes a ms


# -- signature V3 ----------------------------------------------------------------------

def test_the_signed_base_is_plivo_s() -> None:
    url = "https://gw.example/v1/plivo/answer?b=2&a=1"
    assert signature_base(url, [("To", "+2"), ("CallUUID", "u")]) == \
        "https://gw.example/v1/plivo/answer?a=1&b=2.CallUUIDuTo+2"
    assert signature_base("https://gw.example/p", [("A", "1")]) == "https://gw.example/p?A1"
    assert signature_base("https://gw.example/p?x=1", []) == "https://gw.example/p?x=1"
    assert signature_base("https://gw.example/p", []) == "https://gw.example/p"


def test_only_the_auth_token_s_signature_of_this_request_holds() -> None:
    url, params = "https://gw.example/v1/plivo/answer", [("CallUUID", CALL), ("From", "+1")]
    sig = plivo_signature("tok", url, "12345", params)
    assert signature_ok("tok", url, "12345", params, sig)
    assert signature_ok("tok", url, "12345", params, f"AAAA,{sig}")  # one of several
    assert not signature_ok("tok", url, "12346", params, sig)  # another nonce
    assert not signature_ok("tok", url + "?x=1", "12345", params, sig)
    assert not signature_ok("tok", url, "12345", params[:1], sig)
    assert not signature_ok("other", url, "12345", params, sig)
    assert not signature_ok("tok", url, None, params, sig)
    assert not signature_ok("tok", url, "12345", params, None)
