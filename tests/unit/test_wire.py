"""The decoding boundary (duplex/wire.py): the exact inputs of issue 10, the limits at
their edges, and properties: any text → a command or one clean ``InvalidRequest``."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from hostile import REGRESSIONS, Hostile, deep, strategy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex import commands as c
from duplex import wire
from duplex.dispatch import apply_command
from duplex.errors import DuplexError, InvalidRequest
from duplex.fence import Fence
from duplex.session import SessionCore

LIMIT = 4 * 1024 * 1024
CODES = {
    "event_too_large", "invalid_json", "json_too_deep", "invalid_value", "invalid_event",
    "missing_required_parameter", "invalid_type", "invalid_base64",
    "integer_above_max_value", "integer_below_min_value", "decimal_above_max_value",
    "decimal_below_min_value",
}


def refusal(text: str, max_bytes: int = LIMIT) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        wire.decode_command(text, max_bytes=max_bytes)
    return info.value


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_issue_inputs_get_their_error(name: str) -> None:
    text, code = REGRESSIONS[name]
    exc = refusal(text)
    assert exc.code == code
    assert exc.error_type == "invalid_request_error"


@pytest.mark.parametrize(("name", "param"), [
    ("audio_end_ms_1e400", "audio_end_ms"),
    ("audio_end_ms_huge_int", "audio_end_ms"),
    ("server_event_seq_huge", "server_event_seq"),
    ("played_ms_minus_1e400", "played_ms"),
    ("surrogate_event_id", "event_id"),
    ("surrogate_item_id", "item.id"),
    ("surrogate_instructions", "session.instructions"),
    ("surrogate_key", "response.metadata.\ufffd"),
    ("surrogate_close_reason", "reason"),
])
def test_refusals_name_the_offending_place(name: str, param: str) -> None:
    assert refusal(REGRESSIONS[name][0]).param == param


def test_a_usable_event_id_is_echoed_and_a_lone_surrogate_one_is_not() -> None:
    assert refusal('{"type": "x", "event_id": "e1", "n": 1e999}').event_id == "e1"
    assert refusal('{"type": "x", "event_id": "e\\udc00"}').event_id is None


def test_depth_limit_is_exact_and_ignores_brackets_in_strings() -> None:
    def nested(depth: int, opener: str) -> str:  # the event object is one level
        return '{"type": "session.heartbeat", "x": ' + deep(depth - 1, opener) + "}"

    for opener in "[{":
        assert wire.decode_command(nested(wire.MAX_DEPTH, opener), max_bytes=LIMIT) == \
            c.Heartbeat(None)
        assert refusal(nested(wire.MAX_DEPTH + 1, opener)).code == "json_too_deep"
    text = json.dumps({"type": "session.close", "reason": "[{" * 5000})
    assert wire.decode_command(text, max_bytes=LIMIT) == c.CloseSession(None, "[{" * 5000)


def test_number_range_edges() -> None:
    def ack(seq: str) -> object:
        return wire.decode_json('{"type": "session.event_ack", "server_event_seq": '
                                + seq + "}", max_bytes=LIMIT)

    assert ack(str(wire.MAX_INT)) == {"type": "session.event_ack",
                                      "server_event_seq": wire.MAX_INT}
    assert ack(str(-wire.MAX_INT)) is not None
    assert ack("1.7976931348623157e308") is not None and ack("1e-400") is not None
    for seq, code in [(str(wire.MAX_INT + 1), "integer_above_max_value"),
                      (str(-wire.MAX_INT - 1), "integer_below_min_value"),
                      ("1" + "0" * 5000, "integer_above_max_value"),  # past int()'s 4300 digits
                      ("1.8e308", "decimal_above_max_value")]:
        with pytest.raises(InvalidRequest) as info:
            ack(seq)
        assert (info.value.code, info.value.param) == (code, "server_event_seq")


def test_paired_surrogate_escapes_are_text() -> None:
    cmd = wire.decode_command('{"type": "session.close", "reason": "\\ud83d\\ude00"}',
                              max_bytes=LIMIT)
    assert cmd == c.CloseSession(None, "\U0001f600")


def test_size_limit_counts_utf8_bytes() -> None:
    text = json.dumps({"type": "session.close", "reason": "€" * 10}, ensure_ascii=False)
    size = len(text.encode())
    assert wire.decode_command(text, max_bytes=size) == c.CloseSession(None, "€" * 10)
    exc = refusal(text, max_bytes=size - 1)
    assert exc.code == "event_too_large" and str(size) in exc.message


# -- properties -------------------------------------------------------------------------

ANY_CHAR = st.characters(codec=None, categories=None)  # lone surrogates included
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR, max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(ANY_CHAR, max_size=8),
                                                              kids, max_size=4),
    max_leaves=16)
TYPED = st.builds(lambda kind, body: json.dumps({**body, "type": kind}),
                  st.sampled_from(sorted(c.COMMAND_TYPES)),
                  st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=5))
TEXTS = (st.text(ANY_CHAR, max_size=200) | JSON_VALUES.map(json.dumps) | TYPED
         | strategy().filter(lambda m: isinstance(m, str)) | st.binary(max_size=200).map(
             lambda b: b.decode("utf-8", "surrogateescape")))


def _encodable(value: Any) -> None:
    """Every string in ``value`` encodes as UTF-8; every number is in range."""
    if isinstance(value, str):
        value.encode()
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        assert abs(value) <= wire.MAX_INT
    elif isinstance(value, float):
        assert abs(value) < float("inf")
    elif isinstance(value, dict):
        for key, child in value.items():
            _encodable(key)
            _encodable(child)
    elif isinstance(value, list | tuple):
        for child in value:
            _encodable(child)
    elif is_dataclass(value):
        for f in fields(value):
            _encodable(getattr(value, f.name))


@settings(max_examples=1500, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(TEXTS)
def test_any_text_is_a_command_or_one_clean_refusal(text: str) -> None:
    try:
        cmd = wire.decode_command(text, max_bytes=LIMIT)
    except InvalidRequest as exc:
        assert exc.code in CODES, exc.code
        wire_error = exc.to_wire()
        json.dumps(wire_error, ensure_ascii=False).encode()  # sendable as it is
        assert wire_error["type"] == "invalid_request_error"
    else:
        assert isinstance(cmd, c.Command)
        _encodable(cmd)


def _outcome(decode: Any, text: str) -> tuple[object, ...]:
    """What ``decode(text)`` answers, exactly: the value's repr (1 and 1.0, 0.0 and
    -0.0 differ) or the whole refusal."""
    try:
        return ("value", repr(decode(text)))
    except InvalidRequest as exc:
        return ("refusal", exc.code, exc.param, exc.message, exc.event_id)


# number literals at every edge orjson and the stdlib could read apart: 64-bit
# integers and past them (orjson turns those into floats), doubles near overflow,
# subnormals, exponents that underflow to 0.0 or overflow to inf
NUMBERS = (st.integers().map(str)
           | st.integers(-(2**70), 2**70).map(str)
           | st.floats(allow_nan=False, allow_infinity=False).map(repr)
           | st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**20), 10**20),
                       st.integers(-400, 400)))
LITERAL_FRAMES = st.builds(lambda literals: '{"type": "session.event_ack", "n": ['
                           + ", ".join(literals) + "]}", st.lists(NUMBERS, max_size=4))


@settings(max_examples=2000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(TEXTS | LITERAL_FRAMES | NUMBERS)
def test_the_fast_parser_answers_as_the_exact_one(text: str) -> None:
    """orjson first, the stdlib parser for what it refuses or cannot vouch for: any
    text gets the value or the refusal (code, param, message, event_id) the stdlib
    path alone gives."""
    assert _outcome(lambda t: wire.decode_json(t, max_bytes=LIMIT), text) == \
        _outcome(wire._decode_exact, text)


@pytest.mark.parametrize("text", [
    "18446744073709551616",  # past 64 bits: orjson reads a float, 1.8e19
    "-9223372036854775809",
    "9007199254740992",  # MAX_INT + 1: orjson's int, out of range
    "1e20",  # a valid decimal beyond MAX_INT: the stdlib path takes it as it is
    "1e400", '"\\ud800"', '"\\udc00x"', "NaN", "[" * 33 + "]" * 33,
    '{"type": "x", "a": ' + "[" * 40 + "]" * 40 + "}",
])
def test_what_orjson_cannot_vouch_for_gets_the_exact_answer(text: str) -> None:
    assert _outcome(lambda t: wire.decode_json(t, max_bytes=LIMIT), text) == \
        _outcome(wire._decode_exact, text)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TYPED | strategy().filter(lambda m: isinstance(m, str)), max_size=8))
def test_decoded_commands_never_break_the_session_core(texts: list[str]) -> None:
    """What the boundary lets through, the core takes or refuses with a DuplexError;
    the events it emits can go to Redis and the socket as they are."""
    core = SessionCore(Fence("s1", 1, 0, 0))
    for text in texts:
        try:
            apply_command(core, wire.decode_command(text, max_bytes=LIMIT))
        except DuplexError:
            pass
    for effect in core.effects():
        event = getattr(effect, "event", None)
        if event is not None:
            json.dumps(event, ensure_ascii=False).encode()


def test_every_hostile_message_is_refused() -> None:
    """The e2e test and bench/fuzz.py count on it: one error per hostile message."""
    source = Hostile(7)
    for _ in range(3000):
        message = source.message()
        if isinstance(message, bytes):
            assert len(message) % 2 == 1  # odd: never whole PCM16 samples
            continue
        try:
            cmd = wire.decode_command(message, max_bytes=LIMIT)
        except InvalidRequest:
            continue
        with pytest.raises(DuplexError):
            apply_command(SessionCore(Fence("s1", 1, 0, 0)), cmd)
