"""The Realtime codec without I/O: any frame is a command or one clean refusal,
an event goes out as its journaled text, and the close codes' meaning."""

from __future__ import annotations

import json

from hostile import VALID, strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from duplex import wire
from duplex.close_codes import CloseCode
from duplex.errors import DuplexError
from gateway.outbound import Outbound
from gateway.session.attachment import dumps, outbound
from gateway.transports.codec import Report
from gateway.transports.realtime_codec import RealtimeCodec

LIMIT = 64 * 1024
codec = RealtimeCodec(LIMIT)


def _meaning(frame: str | bytes) -> c.Command | Report:
    parsed = codec.parse(frame)
    assert isinstance(parsed, c.Command | Report), parsed
    return parsed


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.binary(max_size=2 * LIMIT), strategy()))
def test_any_frame_is_a_command_or_one_refusal(frame: str | bytes) -> None:
    parsed = _meaning(frame)
    if isinstance(parsed, Report):
        assert isinstance(parsed.error, DuplexError) and parsed.error.code


@given(st.binary(max_size=LIMIT))
def test_a_binary_frame_is_raw_audio(data: bytes) -> None:
    assert codec.parse(data) == c.AppendAudio(None, data)


def test_a_binary_frame_over_the_limit_is_refused() -> None:
    parsed = codec.parse(b"\0" * (LIMIT + 1))
    assert isinstance(parsed, Report) and parsed.error.code == "event_too_large"


@given(st.sampled_from(VALID), st.text(max_size=20))
def test_a_text_frame_decodes_as_the_wire_does(message: dict[str, object],
                                               event_id: str) -> None:
    text = json.dumps({**message, "event_id": event_id})
    parsed = codec.parse(text)
    try:
        expected = wire.decode_command(text, max_bytes=LIMIT)
    except DuplexError as exc:  # e.g. an event_id with a lone surrogate
        assert isinstance(parsed, Report) and parsed.error.code == exc.code
    else:
        assert parsed == expected


@given(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20),
                       max_size=5), st.booleans())
def test_an_event_goes_out_as_its_journaled_text_alone(event: dict[str, object],
                                                      replayed: bool) -> None:
    event = {"type": "response.output_audio.delta", **event}
    out = Outbound(dumps(event)) if replayed else outbound(event)
    rendered = codec.render(out)
    assert rendered.frames == (out.text,) and rendered.answer is None


def test_a_1000_close_ends_the_session_and_any_other_detaches_it() -> None:
    assert codec.ends_session(CloseCode.NORMAL) == "client_close"
    for code in (CloseCode.GOING_AWAY, CloseCode.ABNORMAL, 4000):
        assert codec.ends_session(code) is None
    once = RealtimeCodec(LIMIT, resumable=False)
    assert once.ends_session(CloseCode.NORMAL) == "client_close"
    assert once.ends_session(CloseCode.ABNORMAL) == "disconnect"
