"""Exotel's codec without I/O: nothing Exotel sends raises or ends the call but
``stop``; reply audio goes out in Exotel's chunk sizes, each followed by a mark;
the marks round-trip into the truncate of a barge-in."""

from __future__ import annotations

import base64
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
from codec_strategies import json_values, reply_events
from hostile import strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from duplex.config import AudioFormat
from gateway.outbound import Outbound
from gateway.session.attachment import outbound
from gateway.telephony.chunking import Chunker
from gateway.telephony.exotel_codec import ExotelCodec, stream_format
from gateway.transports.codec import Inbound, Refuse, StreamStart

SID, CALL = "stream-1", "call-1"
START = {"event": "start", "sequence_number": "1", "stream_sid": SID, "start": {
    "stream_sid": SID, "call_sid": CALL, "custom_parameters": {"instructions": "words=3"},
    "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000", "bit_rate": "16"}}}
EVENTS = ["connected", "start", "media", "mark", "dtmf", "stop", "clear", "frobnicate"]


@st.composite
def exotel_messages(draw: st.DrawFn) -> str:
    """Messages shaped like Exotel's, each part possibly wrong."""
    event = draw(st.sampled_from(EVENTS) | st.text(max_size=10))
    body = draw(message_bodies(
        payload=media_payloads, name=st.text(max_size=30) | json_values,
        digit=st.text(max_size=3) | json_values, call_sid=json_values, media_format=json_values))
    return json.dumps({"event": event, event: body,
                       "stream_sid": draw(st.sampled_from([SID, "other"]) | json_values)})


def started() -> ExotelCodec:
    codec = ExotelCodec(LIMIT)
    assert isinstance(codec.parse(json.dumps(START)), StreamStart)
    return codec


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(), st.binary(max_size=64), strategy(), exotel_messages()),
                max_size=8), st.booleans())
def test_nothing_exotel_sends_raises_or_ends_the_call_but_stop(
        frames: list[str | bytes], start: bool) -> None:
    check_parses(started() if start else ExotelCodec(LIMIT), frames, start, "stop")


def test_no_close_ends_the_call_only_stop_does() -> None:
    # a dropped socket, even a normal close, leaves the session for the call's next stream
    for code in (1000, 1001, 1006, 1011, 4000):
        assert started().ends_session(code) is None


def server_events() -> st.SearchStrategy[dict[str, Any]]:
    return reply_events(["response.output_audio.delta", "response.output_audio.done",
                         "input_audio_buffer.speech_started", "error", "session.created"],
                        max_delta=5000)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(server_events(), st.booleans()), max_size=12))
def test_any_event_sequence_renders_exotel_s_messages_in_its_sizes(
        events: list[tuple[dict[str, Any], bool]]) -> None:
    for _, rendered in rendered_each(started(), events):
        for frame in rendered.frames:
            assert isinstance(frame, str)
            message = json.loads(frame)
            assert message["stream_sid"] == SID
            assert message["event"] in ("media", "mark", "clear")
            if message["event"] == "media":
                size = len(base64.b64decode(message["media"]["payload"]))
                assert size % 320 == 0 and size >= 3200
        if rendered.answer is not None:
            assert isinstance(rendered.answer, c.TruncateItem)
            assert rendered.frames == (json.dumps({"event": "clear", "stream_sid": SID}),)


def _delta(rid: str, nbytes: int) -> Outbound:
    return reply_delta(rid, nbytes, b"\x01")  # not silence: the padding is told apart


@settings(deadline=None)  # a busy box is slow, never wrong
@given(st.lists(st.integers(3200, 8000).map(lambda n: n - n % 320), min_size=1, max_size=8),
       st.data())
def test_a_barge_in_truncates_at_the_last_mark_echoed_before_the_clear(
        chunks: list[int], data: st.DataObject) -> None:
    codec = started()
    marks = [json.loads(codec.render(_delta("resp_a", n)).frames[1])["mark"]["name"]
             for n in chunks]
    heard = data.draw(st.integers(0, len(chunks)))

    def echo(name: str) -> Inbound:
        return codec.parse(json.dumps({"event": "mark", "stream_sid": SID, "mark": {
            "name": name}}))

    # 16-bit at 8 kHz: 16 bytes a ms
    if check_barge_in(codec, marks, chunks, heard, echo, 16).answer is None:  # all played
        return
    for name in marks[heard:]:  # Exotel echoes the pending marks on clear: not heard
        echo(name)
    assert codec.render(SPEECH_STARTED).answer is None  # cleared once


def test_short_deltas_wait_and_the_reply_s_tail_is_padded() -> None:
    codec = started()
    assert codec.render(_delta("r", 1000)).frames == ()  # under 3.2 KB: held
    frames = codec.render(_delta("r", 2500)).frames  # 3500: one 3200 chunk, 300 held
    assert len(base64.b64decode(json.loads(frames[0])["media"]["payload"])) == 3200
    done = codec.render(outbound({"type": "response.output_audio.done", "response_id": "r",
                                  "item_id": "item_r"}))
    tail = base64.b64decode(json.loads(done.frames[0])["media"]["payload"])
    assert len(tail) == 3200 and tail[:300] == b"\x01" * 300 and set(tail[300:]) == {0}
    assert json.loads(done.frames[1])["mark"]["name"] == "r:400.000"


def test_the_start_s_media_format_picks_the_session_s() -> None:
    assert stream_format(None) is AudioFormat.L16_8K  # Exotel's default
    assert stream_format({"sample_rate": "16000"}) is AudioFormat.L16_16K
    assert stream_format({"sample_rate": 24000}) is AudioFormat.PCM16
    assert stream_format({"encoding": "audio/x-mulaw", "sample_rate": "8000"}) is AudioFormat.PCMU
    assert stream_format({"encoding": "audio/x-mulaw", "sample_rate": "16000"}) is None
    assert stream_format({"sample_rate": "44100"}) is None
    assert stream_format("8000") is None
    start = {**START, "start": {**START["start"], "media_format": {"sample_rate": "11025"}}}
    assert isinstance(ExotelCodec(LIMIT).parse(json.dumps(start)), Refuse)


def test_a_delta_that_is_not_base64_renders_nothing() -> None:
    codec = started()
    for junk in ("é", "abc"):  # not ASCII; bad padding
        assert codec.render(outbound({"type": "response.output_audio.delta", "delta": junk,
                                      "response_id": "r", "item_id": "i"})).frames == ()


def test_the_chunker_keeps_whole_steps_over_its_least() -> None:
    chunker = Chunker(320, 3200)
    assert chunker.add(b"\x01" * 3199) == b"" and chunker.pending == 3199
    assert len(chunker.add(b"\x01" * 400)) == 3520 and chunker.pending == 79
    assert len(chunker.flush()) == 3200 and chunker.flush() == b""
    chunker.add(b"\x01" * 10)
    chunker.drop()
    assert chunker.pending == 0
