"""Twilio's codec without I/O: nothing Twilio sends raises or ends the call but
``stop``; the messages built from templates are byte for byte ``json.dumps``'s;
and the marks round-trip into the truncate of a barge-in."""

from __future__ import annotations

import json
from typing import Any

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
from codec_strategies import json_values, payloads, server_events
from hostile import strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from gateway.session.attachment import outbound
from gateway.telephony.twilio_codec import TwilioCodec
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

SID = "MZ" + "0" * 32
CALL = "CA" + "1" * 32
START = {"event": "start", "streamSid": SID, "start": {
    "streamSid": SID, "callSid": CALL, "customParameters": {"token": "t"},
    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}
EVENTS = ["connected", "start", "media", "mark", "dtmf", "stop", "clear", "frobnicate"]


@st.composite
def twilio_messages(draw: st.DrawFn) -> str:
    """Messages shaped like Twilio's, each part possibly wrong."""
    event = draw(st.sampled_from(EVENTS) | st.text(max_size=10))
    body = draw(message_bodies(
        track=st.sampled_from(["inbound", "outbound", "inbound_track"]) | json_values,
        payload=media_payloads, name=st.text(max_size=30) | json_values,
        digit=st.text(max_size=3) | json_values))
    message = {"event": event, event: body,
               "streamSid": draw(st.sampled_from([SID, "MZother"]) | json_values)}
    return json.dumps(message)


def started() -> TwilioCodec:
    codec = TwilioCodec(LIMIT)
    assert isinstance(codec.parse(json.dumps(START)), StreamStart)
    return codec


FRAMES = st.one_of(st.text(), st.binary(max_size=64), strategy(), twilio_messages())


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FRAMES, max_size=8), st.booleans())
def test_nothing_twilio_sends_raises_or_ends_the_call_but_stop(
        frames: list[str | bytes], start: bool) -> None:
    check_parses(started() if start else TwilioCodec(LIMIT), frames, start, "stop")


def test_the_start_says_which_call_and_what_our_webhook_passed() -> None:
    codec = TwilioCodec(LIMIT)
    assert codec.parse(json.dumps({"event": "connected", "protocol": "Call"})) == Hello()
    assert codec.parse(json.dumps({"event": "media", "media": {}})) == QUIET
    assert codec.parse(json.dumps({"event": "stop"})) == QUIET  # not started: not ours
    assert codec.parse(json.dumps(START)) == StreamStart(SID, CALL, {"token": "t"}, "audio/pcmu")
    assert codec.parse(json.dumps({"event": "stop", "streamSid": SID})) == Hangup("twilio_stop")


def test_a_start_in_another_format_is_refused() -> None:
    bad = {**START, "start": {**START["start"], "mediaFormat": {"encoding": "audio/l16",
                                                                "sampleRate": 16000}}}
    refused = TwilioCodec(LIMIT).parse(json.dumps(bad))
    assert isinstance(refused, Refuse) and "unsupported media format" in refused.why
    assert isinstance(TwilioCodec(LIMIT).parse('{"event": "start"}'), Refuse)


def test_media_and_dtmf_once_started() -> None:
    codec = started()
    media = {"event": "media", "streamSid": SID, "media": {"payload": "AAEC"}}
    assert codec.parse(json.dumps(media)) == c.AppendAudio(None, b"\0\1\2")
    dtmf = {"event": "dtmf", "streamSid": SID, "dtmf": {"digit": "7#"}}
    assert codec.parse(json.dumps(dtmf)) == Keypress("7")
    other = {**media, "streamSid": "MZother"}
    assert codec.parse(json.dumps(other)) == Ignore("stream_sid", "'media' for another stream")
    assert codec.parse(b"\0") == Ignore("binary", "a binary frame")


sids = st.text(max_size=20)


@settings(deadline=None, max_examples=300)
@given(sids, payloads, st.text(max_size=20))
def test_the_templates_are_byte_for_byte_json_dumps(sid: str, payload: str, rid: str) -> None:
    codec = TwilioCodec(LIMIT)
    start = {**START, "streamSid": sid, "start": {**START["start"], "streamSid": sid}}
    assert isinstance(codec.parse(json.dumps(start)), StreamStart)
    event = {"type": "response.output_audio.delta", "response_id": rid, "item_id": "item_1",
             "delta": payload}
    media, mark = codec.render(outbound(event)).frames
    assert media == json.dumps({"event": "media", "media": {"payload": payload},
                                "streamSid": sid})
    name = json.loads(mark)["mark"]["name"]
    assert name.rpartition(":")[0] == rid
    assert mark == json.dumps({"event": "mark", "mark": {"name": name}, "streamSid": sid})


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(server_events(), st.booleans()), max_size=12))
def test_any_event_sequence_renders_to_messages_of_this_stream(
        events: list[tuple[dict[str, Any], bool]]) -> None:
    for event, rendered in rendered_each(started(), events):
        for frame in rendered.frames:
            assert isinstance(frame, str)
            message = json.loads(frame)
            assert message["streamSid"] == SID
            assert message["event"] in ("media", "mark", "clear")
        if rendered.answer is not None:
            assert event["type"] == "input_audio_buffer.speech_started"
            assert isinstance(rendered.answer, c.TruncateItem)
            assert rendered.frames == (json.dumps({"event": "clear", "streamSid": SID}),)


def _echo(codec: TwilioCodec, mark: str) -> Inbound:
    name = json.loads(mark)["mark"]["name"]
    echo = {"event": "mark", "streamSid": SID, "mark": {"name": name}}
    return codec.parse(json.dumps(echo))


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=10), st.data())
def test_a_barge_in_truncates_at_the_last_mark_echoed_before_the_clear(
        chunks: list[int], data: st.DataObject) -> None:
    codec = started()
    marks = [codec.render(reply_delta("resp_a", n)).frames[1] for n in chunks]
    heard = data.draw(st.integers(0, len(chunks)))
    # μ-law: 8 bytes a ms
    rendered = check_barge_in(codec, marks, chunks, heard, lambda m: _echo(codec, m), 8)
    if rendered.answer is None:  # all of it played
        return
    for mark in marks[heard:]:  # Twilio echoes the pending marks on clear: flushed, not heard
        assert _echo(codec, mark) == QUIET
    assert codec.render(SPEECH_STARTED).answer is None  # cleared once
    # the next reply starts afresh
    codec.render(reply_delta("resp_b", 800))
    assert codec.render(SPEECH_STARTED).answer == c.TruncateItem(None, "item_resp_b", 0, 0)


def test_a_mark_not_of_ours_is_ignored_with_a_reason() -> None:
    codec = started()
    codec.render(reply_delta("resp_a", 80))
    foreign = {"event": "mark", "streamSid": SID, "mark": {"name": "resp_a:soon"}}
    assert codec.parse(json.dumps(foreign)) == Ignore("foreign_mark",
                                                      "mark 'resp_a:soon', not one of ours")
    other_reply = {"event": "mark", "streamSid": SID, "mark": {"name": "resp_z:5.000"}}
    assert codec.parse(json.dumps(other_reply)) == QUIET
