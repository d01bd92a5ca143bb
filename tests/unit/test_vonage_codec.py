"""Vonage's codec and webhook signatures without I/O: nothing Vonage sends raises
or ends the call; reply audio goes out one 20 ms frame a message, each delta's
frames followed by a notify; the notify echoes round-trip into the truncate of a
barge-in; the JWT check takes Vonage's signatures and nothing else."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from carrier_codec_checks import (
    LIMIT,
    check_barge_in,
    check_parses,
    rendered_each,
    reply_delta,
)
from codec_strategies import json_values, reply_events
from hostile import strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from gateway.telephony.vonage import jwt_refusal, sign
from gateway.telephony.vonage_codec import CLEAR, VonageCodec
from gateway.transports.codec import QUIET, Keypress, Refuse, StreamStart

CALL = "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"
CONNECTED = {"event": "websocket:connected", "content-type": "audio/l16;rate=16000",
             "call": CALL, "token": "t", "instructions": "words=3", "other": "x"}
EVENTS = ["websocket:connected", "websocket:dtmf", "websocket:notify", "websocket:cleared",
          "frobnicate"]


@st.composite
def vonage_messages(draw: st.DrawFn) -> str | bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=700))
    message: dict[str, Any] = {"event": draw(st.sampled_from(EVENTS) | json_values)}
    message.update(draw(st.fixed_dictionaries({}, optional={
        "digit": st.text(max_size=3) | json_values, "payload": json_values,
        "content-type": st.sampled_from(["audio/l16;rate=8000", "audio/pcmu"]) | json_values,
        "call": json_values})))
    return json.dumps(message)


def started() -> VonageCodec:
    codec = VonageCodec(LIMIT)
    assert isinstance(codec.parse(json.dumps(CONNECTED)), StreamStart)
    return codec


# binary frames are Vonage's audio: whole frames, ragged and odd-length ones alike
@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(), st.binary(max_size=1300), strategy(), vonage_messages()),
                max_size=8),
       st.booleans())
def test_nothing_vonage_sends_raises_or_ends_the_call(frames: list[str | bytes],
                                                      start: bool) -> None:
    # Vonage hangs up by closing: no message does
    check_parses(started() if start else VonageCodec(LIMIT), frames, start, None)


def test_the_first_message_is_the_start() -> None:
    start = VonageCodec(LIMIT).parse(json.dumps(CONNECTED))
    assert start == StreamStart(CALL, CALL, {"token": "t", "instructions": "words=3"},
                                "audio/l16;rate=16000")
    for wrong in ({**CONNECTED, "content-type": "audio/pcmu"}, {**CONNECTED, "call": 5}):
        assert isinstance(VonageCodec(LIMIT).parse(json.dumps(wrong)), Refuse)
    codec = started()
    assert codec.parse(b"\x00" * 640) == c.AppendAudio(None, b"\x00" * 640)
    assert codec.parse(json.dumps({"event": "websocket:dtmf", "digit": "5",
                                   "duration": 260})) == Keypress("5")
    assert codec.parse(json.dumps({"event": "websocket:cleared"})) == QUIET
    assert codec.ends_session(1000) == "vonage_hangup" and codec.ends_session(1006) is None


def server_events() -> st.SearchStrategy[dict[str, Any]]:
    return reply_events(["response.output_audio.delta", "response.output_audio.done",
                         "input_audio_buffer.speech_started", "error"], max_delta=3000)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(server_events(), st.booleans()), max_size=12))
def test_any_event_sequence_renders_whole_frames_and_vonage_s_actions(
        events: list[tuple[dict[str, Any], bool]]) -> None:
    for _, rendered in rendered_each(started(), events):
        for frame in rendered.frames:
            if isinstance(frame, bytes):
                assert len(frame) == 640
            else:
                assert json.loads(frame)["action"] in ("notify", "clear")
        if rendered.answer is not None:
            assert isinstance(rendered.answer, c.TruncateItem)
            assert rendered.frames == (CLEAR,)


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.lists(st.integers(1, 20).map(lambda n: 640 * n), min_size=1, max_size=8), st.data())
def test_a_barge_in_truncates_at_the_last_notify_echoed_before_the_clear(
        chunks: list[int], data: st.DataObject) -> None:
    codec = started()
    names = [json.loads(codec.render(reply_delta("resp_a", n, b"\x01")).frames[-1])
             ["payload"]["name"] for n in chunks]
    heard = data.draw(st.integers(0, len(chunks)))
    check_barge_in(codec, names, chunks, heard, lambda name: codec.parse(json.dumps(
        {"event": "websocket:notify", "payload": {"name": name}})), 32)  # 16-bit, 16 kHz


def test_the_jwt_check_takes_vonage_s_signatures_alone() -> None:
    body, now = b'{"uuid": "x"}', 1_700_000_000.0
    good = "Bearer " + sign("s3cret", body, now)
    assert jwt_refusal("s3cret", good, body, now + 10) is None
    assert jwt_refusal("s3cret", good, b"", now) is None  # a GET: no body to hash
    assert jwt_refusal("other", good, body, now) is not None
    assert jwt_refusal("s3cret", good, b'{"uuid": "y"}', now) is not None
    assert jwt_refusal("s3cret", good, body, now + 3600) is not None  # stale
    assert jwt_refusal("s3cret", "Bearer " + sign("s3cret", body, now, exp=now - 1),
                       body, now) is not None
    head, claims, mac = good.split(" ")[1].split(".")
    none_alg = base64.urlsafe_b64encode(b'{"alg": "none"}').rstrip(b"=").decode()
    for bad in (None, "", "Basic x", "Bearer a.b", f"Bearer {none_alg}.{claims}.{mac}",
                "Bearer !!.??.**", f"Bearer {head}.{claims}.{mac[:-4]}AAAA"):
        assert jwt_refusal("s3cret", bad, body, now) is not None
    assert hashlib.sha256(body).hexdigest() in base64.urlsafe_b64decode(claims + "==").decode()
