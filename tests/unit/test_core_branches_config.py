"""duplex/config.py: nulls that keep a value, partial GA output blocks, and two properties.

``tests/unit/test_config.py`` holds the field-by-field tables; this file adds
the branches they leave out and Hypothesis checks of ``apply_update`` as a
pure function: any JSON value gives a config or an ``InvalidRequest``, and
every config survives a trip through its own GA wire form.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplex.config import AudioFormat, SessionConfig, TurnDetection, apply_update
from duplex.errors import InvalidRequest

CURRENT = SessionConfig(
    voice="v1", output_format=AudioFormat.PCMU,
    turn_detection=TurnDetection(threshold=0.8, prefix_padding_ms=120,
                                 silence_duration_ms=650),
)


@pytest.mark.parametrize("key", ["threshold", "prefix_padding_ms", "silence_duration_ms"])
def test_a_null_vad_number_keeps_the_current_value(key: str) -> None:
    out = apply_update(CURRENT, {"turn_detection": {key: None}})
    assert out.turn_detection == CURRENT.turn_detection


@pytest.mark.parametrize(
    ("output", "changes"),
    [
        ({}, {}),
        ({"voice": "v2"}, {"voice": "v2"}),  # voice alone keeps the format
        ({"voice": None, "format": "pcm16"}, {"output_format": AudioFormat.PCM16}),
        ({"speed": 1.5}, {}),  # not ours to change: ignored
    ],
)
def test_ga_output_block_changes_only_its_present_fields(
    output: dict[str, Any], changes: dict[str, Any]
) -> None:
    assert apply_update(CURRENT, {"audio": {"output": output}}) == replace(CURRENT, **changes)


def test_a_non_string_voice_is_refused_naming_it() -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(CURRENT, {"audio": {"output": {"voice": 7}}})
    assert info.value.param == "session.audio.output.voice"


def test_ga_output_block_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(CURRENT, {"audio": {"output": ["voice"]}})
    assert info.value.param == "session.audio.output"


# -- properties ----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
KEYS = st.sampled_from([
    "instructions", "model", "voice", "output_modalities", "modalities",
    "max_output_tokens", "max_response_output_tokens", "input_audio_format",
    "output_audio_format", "turn_detection", "input_audio_transcription", "audio",
    "input", "output", "format", "type", "rate", "threshold", "prefix_padding_ms",
    "silence_duration_ms", "create_response", "interrupt_response", "idle_timeout_ms",
    "transcription",
])
# nested objects keyed by the names apply_update looks for, so it gets past _obj
SESSIONS = st.recursive(
    JSON, lambda children: st.dictionaries(KEYS, children, max_size=4), max_leaves=16)

FORMAT = st.sampled_from(["pcm16", "g711_ulaw", "g711_alaw", "audio/pcm", "audio/pcmu",
                          "audio/pcma"]) | st.sampled_from([{"type": "audio/pcm",
                                                             "rate": 24000},
                                                            {"type": "audio/pcma"}])
VAD = st.none() | st.fixed_dictionaries({}, optional={
    "type": st.just("server_vad"), "threshold": st.none() | st.floats(0.0, 1.0),
    "prefix_padding_ms": st.integers(0, 5000), "silence_duration_ms": st.integers(0, 10000),
    "create_response": st.booleans(), "interrupt_response": st.booleans(),
    "idle_timeout_ms": st.none() | st.integers(0, 10**6),
})
VAD_NUMBERS = {"threshold", "prefix_padding_ms", "silence_duration_ms"}
TRANSCRIPTION = st.none() | st.fixed_dictionaries(
    {}, optional={"model": st.text(max_size=4)})
NAME = st.text(max_size=6)  # a non-string model or voice is refused (duplex.wire's rules)
# updates every field of which is acceptable, in both shapes at once
VALID = st.fixed_dictionaries({}, optional={
    "instructions": st.text(max_size=6), "model": NAME, "voice": NAME,
    "output_modalities": st.lists(st.sampled_from(["audio", "text"]), min_size=1,
                                  max_size=3),
    "max_output_tokens": st.none() | st.just("inf") | st.integers(1, 4096),
    "input_audio_format": FORMAT, "output_audio_format": FORMAT, "turn_detection": VAD,
    "input_audio_transcription": TRANSCRIPTION,
    "audio": st.fixed_dictionaries({}, optional={
        "input": st.fixed_dictionaries({}, optional={
            "format": FORMAT, "turn_detection": VAD, "transcription": TRANSCRIPTION}),
        "output": st.fixed_dictionaries({}, optional={"format": FORMAT, "voice": NAME}),
    }),
    "tools": st.lists(st.sampled_from(["get_weather", "lookup", "a-b_9"]), unique=True).map(
        lambda names: [{"type": "function", "name": n, "description": n} for n in names]),
    "tool_choice": st.sampled_from(["auto", "none", "required"]),
    "parallel_tool_calls": st.booleans(),
})
# the top-level keys that may change each field ("only fields present change")
CHANGED_BY = {
    "model": {"model"}, "instructions": {"instructions"},
    "output_modalities": {"output_modalities", "modalities"},
    "max_output_tokens": {"max_output_tokens", "max_response_output_tokens"},
    "voice": {"voice", "audio"}, "input_format": {"input_audio_format", "audio"},
    "output_format": {"output_audio_format", "audio"},
    "turn_detection": {"turn_detection", "audio"},
    "transcription": {"input_audio_transcription", "audio"},
    "tools": {"tools", "tool_choice", "parallel_tool_calls"},
    "kind": {"type"},
}


def test_changed_by_names_every_field() -> None:
    assert set(CHANGED_BY) == set(SessionConfig.__dataclass_fields__)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(SESSIONS)
def test_apply_update_gives_a_config_or_invalid_request(session: object) -> None:
    try:
        out = apply_update(CURRENT, session)
    except InvalidRequest as exc:
        assert exc.error_type == "invalid_request_error"
        assert exc.param is not None and exc.param.startswith("session")
    else:
        assert isinstance(out, SessionConfig) and isinstance(session, dict)


@settings(max_examples=200, deadline=None, database=None)
@given(VALID)
def test_a_valid_update_changes_only_the_fields_it_names(update: dict[str, Any]) -> None:
    out = apply_update(CURRENT, update)
    for name, keys in CHANGED_BY.items():
        if not update.keys() & keys:
            assert getattr(out, name) == getattr(CURRENT, name), name
    if "instructions" in update:
        assert out.instructions == update["instructions"]
    if "output_modalities" in update:
        assert out.output_modalities == tuple(dict.fromkeys(update["output_modalities"]))
    if "model" in update:
        assert out.model == update["model"]
    vad = update.get("turn_detection")
    if isinstance(vad, dict) and "audio" not in update:
        assert out.turn_detection is not None and CURRENT.turn_detection is not None
        for name in TurnDetection.__dataclass_fields__:
            # absent fields, and null numbers, keep the current value: updates are relative
            keep = name not in vad or (vad[name] is None and name in VAD_NUMBERS)
            expected = getattr(CURRENT.turn_detection, name) if keep else vad[name]
            assert getattr(out.turn_detection, name) == expected, name


TURN_DETECTION = st.builds(
    TurnDetection,
    threshold=st.floats(0.0, 1.0),
    prefix_padding_ms=st.integers(0, 5000),
    silence_duration_ms=st.integers(0, 10000),
    create_response=st.booleans(),
    interrupt_response=st.booleans(),
    idle_timeout_ms=st.none() | st.integers(0, 10**9),
)
CONFIGS = st.builds(
    SessionConfig,
    model=st.text(max_size=8),
    instructions=st.text(max_size=8),
    output_modalities=st.sampled_from([("audio",), ("text",), ("audio", "text"),
                                       ("text", "audio")]),
    input_format=st.sampled_from(AudioFormat),
    output_format=st.sampled_from(AudioFormat),
    turn_detection=st.none() | TURN_DETECTION,
    voice=st.text(max_size=8),
    # "" is not a model name: the wire says null for it, which reads back as None
    transcription=st.none() | st.text(min_size=1, max_size=8),
    max_output_tokens=st.none() | st.integers(1, 4096),
)


@settings(max_examples=200, deadline=None, database=None)
@given(CONFIGS)
def test_every_config_survives_its_ga_wire_form(config: SessionConfig) -> None:
    assert apply_update(SessionConfig(), config.wire("sess_1")) == config
