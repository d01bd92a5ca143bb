"""Client → server parsing: every command, every error code, and a property test."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from duplex.errors import InvalidRequest

PCM = base64.b64encode(b"\x01\x02\x03\x04").decode()


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"type": "session.update", "session": {"instructions": "x"}},
         c.UpdateSession(None, {"instructions": "x"})),
        ({"type": "transcription_session.update", "session": {"include": []}},
         c.UpdateSession(None, {"include": [], "type": "transcription"})),
        ({"type": "input_audio_buffer.append", "audio": PCM},
         c.AppendAudio(None, b"\x01\x02\x03\x04")),
        ({"type": "input_audio_buffer.append", "audio": ""}, c.AppendAudio(None, b"")),
        ({"type": "input_audio_buffer.commit"}, c.CommitInput(None)),
        ({"type": "input_audio_buffer.clear"}, c.ClearInput(None)),
        ({"type": "response.create"}, c.CreateResponse(None, None, None, None, False)),
        ({"type": "response.create", "response": None},
         c.CreateResponse(None, None, None, None, False)),
        ({"type": "response.create", "response": {
            "instructions": "Say hi", "output_modalities": ["text"], "metadata": {"k": "1"},
            "conversation": "none"}},
         c.CreateResponse(None, "Say hi", ("text",), {"k": "1"}, True)),
        ({"type": "response.create", "response": {"modalities": ["audio", "text"],
                                                  "metadata": None,
                                                  "conversation": "auto"}},
         c.CreateResponse(None, None, ("audio", "text"), None, False)),
        ({"type": "response.cancel"}, c.CancelResponse(None, None)),
        ({"type": "response.cancel", "response_id": "resp_1"}, c.CancelResponse(None, "resp_1")),
        ({"type": "output_audio_buffer.clear"}, c.ClearOutputAudio(None)),
        ({"type": "conversation.item.create", "item": {"role": "user"}},
         c.CreateItem(None, {"role": "user"}, None)),
        ({"type": "conversation.item.create", "item": {}, "previous_item_id": "i1"},
         c.CreateItem(None, {}, "i1")),
        ({"type": "conversation.item.retrieve", "item_id": "i1"}, c.RetrieveItem(None, "i1")),
        ({"type": "conversation.item.delete", "item_id": "i1"}, c.DeleteItem(None, "i1")),
        ({"type": "conversation.item.truncate", "item_id": "i1", "audio_end_ms": 150},
         c.TruncateItem(None, "i1", 0, 150)),
        ({"type": "conversation.item.truncate", "item_id": "i1", "content_index": 0,
          "audio_end_ms": 0}, c.TruncateItem(None, "i1", 0, 0)),
        ({"type": "playback.ack", "played_ms": 120},
         c.PlaybackAck(None, 120.0, None, None, False)),
        ({"type": "playback.ack", "played_ms": 12.5, "response_id": "r", "item_id": "i",
          "truncate": True}, c.PlaybackAck(None, 12.5, "r", "i", True)),
        ({"type": "session.heartbeat"}, c.Heartbeat(None)),
        ({"type": "session.event_ack", "server_event_seq": 7}, c.AckEvents(None, 7)),
        ({"type": "session.close"}, c.CloseSession(None, "client_close")),
        ({"type": "session.close", "reason": "bye"}, c.CloseSession(None, "bye")),
        ({"type": "session.resume", "resume_token": "tok"},
         c.ResumeSession(None, None, "tok", 0)),
        ({"type": "session.resume", "resume_token": "tok", "session_id": "s1",
          "last_received_server_event_seq": 42}, c.ResumeSession(None, "s1", "tok", 42)),
    ],
)
def test_parse_every_command(obj: dict[str, Any], expected: c.Command) -> None:
    assert c.parse_command(obj) == expected
    with_id = c.parse_command({**obj, "event_id": "evt_9"})
    assert with_id.event_id == "evt_9"
    assert type(with_id) is type(expected)


def test_every_command_type_is_covered() -> None:
    assert c.COMMAND_TYPES == {
        "session.update", "transcription_session.update", "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear", "response.create", "response.cancel",
        "output_audio_buffer.clear", "conversation.item.create",
        "conversation.item.retrieve", "conversation.item.delete",
        "conversation.item.truncate", "playback.ack", "session.heartbeat",
        "session.event_ack", "session.close", "session.resume",
    }


def test_non_string_event_id_is_dropped() -> None:
    assert c.parse_command({"type": "session.heartbeat", "event_id": 5}).event_id is None


@pytest.mark.parametrize(
    ("obj", "code", "param"),
    [
        ([], "invalid_event", None),
        ("session.update", "invalid_event", None),
        (None, "invalid_event", None),
        (3, "invalid_event", None),
        ({}, "missing_required_parameter", "type"),
        ({"type": 5}, "missing_required_parameter", "type"),
        ({"type": "response.cancelled"}, "invalid_value", "type"),
        ({"type": "transcription_session.update"}, "missing_required_parameter", "session"),
        ({"type": "transcription_session.created"}, "invalid_value", "type"),
        ({"type": "session.update"}, "missing_required_parameter", "session"),
        ({"type": "session.update", "session": []}, "invalid_type", "session"),
        ({"type": "input_audio_buffer.append"}, "missing_required_parameter", "audio"),
        ({"type": "input_audio_buffer.append", "audio": 12}, "invalid_type", "audio"),
        ({"type": "input_audio_buffer.append", "audio": "not base64!"}, "invalid_base64",
         "audio"),
        ({"type": "input_audio_buffer.append", "audio": "AAA"}, "invalid_base64", "audio"),
        ({"type": "input_audio_buffer.append", "audio": "ÄÖÜ="}, "invalid_base64", "audio"),
        ({"type": "response.create", "response": "x"}, "invalid_type", "response"),
        ({"type": "response.create", "response": {"instructions": 1}}, "invalid_type",
         "response.instructions"),
        ({"type": "response.create", "response": {"output_modalities": ["video"]}},
         "invalid_value", "response.output_modalities"),
        ({"type": "response.create", "response": {"output_modalities": []}},
         "invalid_value", "response.output_modalities"),
        ({"type": "response.create", "response": {"modalities": "audio"}},
         "invalid_value", "response.output_modalities"),
        ({"type": "response.create", "response": {"metadata": "not-a-map"}},
         "invalid_type", "response.metadata"),
        ({"type": "response.create", "response": {"conversation": "conv_1"}},
         "invalid_value", "response.conversation"),
        ({"type": "response.create", "response": {"input": {"type": "message"}}},
         "invalid_type", "response.input"),
        ({"type": "response.create", "response": {"input": ["words"]}},
         "invalid_type", "response.input[0]"),
        ({"type": "response.cancel", "response_id": 3}, "invalid_type", "response_id"),
        ({"type": "conversation.item.create"}, "missing_required_parameter", "item"),
        ({"type": "conversation.item.create", "item": "x"}, "invalid_type", "item"),
        ({"type": "conversation.item.create", "item": {}, "previous_item_id": 1},
         "invalid_type", "previous_item_id"),
        ({"type": "conversation.item.retrieve"}, "missing_required_parameter", "item_id"),
        ({"type": "conversation.item.retrieve", "item_id": ""}, "invalid_value", "item_id"),
        ({"type": "conversation.item.delete", "item_id": 4}, "invalid_type", "item_id"),
        ({"type": "conversation.item.truncate", "item_id": "i"},
         "missing_required_parameter", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": -1},
         "integer_below_min_value", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": 1.5},
         "invalid_type", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": True},
         "invalid_type", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": 1,
          "content_index": None}, "missing_required_parameter", "content_index"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": 1,
          "content_index": -1}, "integer_below_min_value", "content_index"),
        ({"type": "conversation.item.truncate", "audio_end_ms": 1},
         "missing_required_parameter", "item_id"),
        ({"type": "playback.ack"}, "invalid_value", "played_ms"),
        ({"type": "playback.ack", "played_ms": -1}, "invalid_value", "played_ms"),
        ({"type": "playback.ack", "played_ms": "10"}, "invalid_value", "played_ms"),
        ({"type": "playback.ack", "played_ms": False}, "invalid_value", "played_ms"),
        ({"type": "playback.ack", "played_ms": 1, "item_id": 2}, "invalid_type", "item_id"),
        ({"type": "playback.ack", "played_ms": 1, "truncate": "yes"}, "invalid_value",
         "truncate"),
        ({"type": "session.close", "reason": {"why": 1}}, "invalid_type", "reason"),
        ({"type": "session.event_ack"}, "missing_required_parameter", "server_event_seq"),
        ({"type": "session.event_ack", "server_event_seq": "3"}, "invalid_type",
         "server_event_seq"),
        ({"type": "session.resume"}, "missing_required_parameter", "resume_token"),
        ({"type": "session.resume", "resume_token": ""}, "invalid_value", "resume_token"),
        ({"type": "session.resume", "resume_token": "t",
          "last_received_server_event_seq": -2}, "integer_below_min_value",
         "last_received_server_event_seq"),
    ],
)
def test_errors(obj: object, code: str, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        c.parse_command(obj)
    assert info.value.code == code
    assert info.value.param == param
    assert info.value.event_id is None
    wire = info.value.to_wire()
    assert wire["type"] == "invalid_request_error" and wire["code"] == code


@pytest.mark.parametrize(
    "obj",
    [
        {"type": 5},
        {"type": "nope"},
        {"type": "session.update", "session": 1},
        {"type": "input_audio_buffer.append", "audio": "***"},
        {"type": "conversation.item.truncate", "item_id": "i"},
        {"type": "playback.ack", "played_ms": -3},
        {"type": "session.resume"},
    ],
)
def test_event_id_is_propagated_into_errors(obj: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as info:
        c.parse_command({**obj, "event_id": "evt_42"})
    assert info.value.event_id == "evt_42"
    assert info.value.to_wire()["event_id"] == "evt_42"


def test_decode_base64_audio() -> None:
    assert c.decode_base64_audio(PCM) == b"\x01\x02\x03\x04"
    with pytest.raises(InvalidRequest) as info:
        c.decode_base64_audio(None)
    assert info.value.code == "missing_required_parameter"


def test_base64_that_pybase64_refuses_is_read_as_the_stdlib_reads_it() -> None:
    assert c.decode_base64_audio("QUJD====") == b"ABC"  # excess padding: pybase64 refuses


BASE64ISH = st.text(st.sampled_from("AQUJDRab+/=-_ \n\x00é"), max_size=24) | st.binary(
    max_size=30).map(lambda b: base64.b64encode(b).decode())


@settings(max_examples=1500, deadline=None, database=None)
@given(BASE64ISH)
def test_base64_audio_decodes_as_the_stdlib_decodes(text: str) -> None:
    try:
        expected: bytes | None = base64.b64decode(text, validate=True)
    except ValueError:
        expected = None
    try:
        got: bytes | None = c.decode_base64_audio(text)
    except InvalidRequest as exc:
        assert exc.code == "invalid_base64"
        got = None
    assert got == expected


# -- known bugs (commands.py is not ours to edit) -------------------------------------


def test_huge_integer_played_ms_is_invalid_request() -> None:
    obj = json.loads('{"type": "playback.ack", "played_ms": 1' + "0" * 400 + "}")
    with pytest.raises(InvalidRequest) as info:
        c.parse_command(obj)
    assert info.value.code == "invalid_value"


def test_nan_played_ms_is_invalid_value() -> None:
    obj = json.loads('{"type": "playback.ack", "played_ms": NaN, "truncate": true}')
    assert math.isnan(obj["played_ms"])
    with pytest.raises(InvalidRequest) as info:
        c.parse_command(obj)
    assert info.value.code == "invalid_value"


# -- property: any JSON-like value → a Command or InvalidRequest, nothing else ---------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
FIELD_NAMES = st.sampled_from([
    "event_id", "session", "audio", "response", "response_id", "item", "previous_item_id",
    "item_id", "content_index", "audio_end_ms", "played_ms", "truncate", "server_event_seq",
    "reason", "resume_token", "session_id", "last_received_server_event_seq",
]) | st.text(max_size=10)
FIELD_VALUES = (
    JSON
    | st.sampled_from([PCM, "", "AAA=", "i1", "resp_1", "audio", "none"])
    | st.dictionaries(st.sampled_from(["instructions", "output_modalities", "modalities",
                                       "metadata", "conversation", "role", "content"]),
                      JSON | st.lists(st.sampled_from(["audio", "text", "video"]), max_size=3),
                      max_size=4)
)
TYPED = st.builds(
    lambda kind, fields: {**fields, "type": kind},
    st.sampled_from(sorted(c.COMMAND_TYPES)),
    st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=6),
)


@settings(max_examples=1000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(JSON | TYPED)
def test_parse_command_never_raises_anything_else(obj: object) -> None:
    try:
        cmd = c.parse_command(obj)
    except InvalidRequest as exc:
        assert exc.code in {"invalid_event", "missing_required_parameter", "invalid_type",
                            "invalid_base64", "invalid_value", "integer_below_min_value"}
        assert exc.error_type == "invalid_request_error"
        raw_id = obj.get("event_id") if isinstance(obj, dict) else None
        assert exc.event_id == (raw_id if isinstance(raw_id, str) else None)
    else:
        assert isinstance(cmd, c.Command)
        assert isinstance(obj, dict) and obj["type"] in c.COMMAND_TYPES
        assert type(cmd).__module__ == "duplex.commands"
