"""session.update: GA and beta shapes, rejected fields, wire round trips."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from duplex.config import (
    AudioFormat,
    SessionConfig,
    TurnDetection,
    apply_update,
    parse_format,
)
from duplex.errors import InvalidRequest

DEFAULT = SessionConfig()
SEMANTIC = TurnDetection(type="semantic_vad")


@pytest.mark.parametrize(
    ("update", "changes"),
    [
        ({}, {}),
        ({"instructions": "Be brief."}, {"instructions": "Be brief."}),
        ({"model": "m2"}, {"model": "m2"}),
        ({"model": None, "voice": None}, {}),  # null keeps the current value
        ({"voice": "alloy"}, {"voice": "alloy"}),
        ({"output_modalities": ["text"]}, {"output_modalities": ("text",)}),
        ({"output_modalities": ["audio", "text", "audio"]},
         {"output_modalities": ("audio", "text")}),
        ({"max_output_tokens": 100}, {"max_output_tokens": 100}),
        ({"max_output_tokens": "inf"}, {"max_output_tokens": None}),
        # GA
        ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}},
         {"input_format": AudioFormat.PCMU}),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
         {"input_format": AudioFormat.PCM16}),
        ({"audio": {"output": {"format": {"type": "audio/pcma"}, "voice": "v2"}}},
         {"output_format": AudioFormat.PCMA, "voice": "v2"}),
        ({"audio": {"input": {"turn_detection": None}}}, {"turn_detection": None}),
        ({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 0.8}}}},
         {"turn_detection": TurnDetection(threshold=0.8)}),
        ({"audio": {"input": {"transcription": None}}}, {"transcription": None}),
        ({"audio": {"input": {"transcription": {"model": "whisper"}}}},
         {"transcription": "whisper"}),
        ({"audio": {}}, {}),
        # beta
        ({"modalities": ["text", "audio"]}, {"output_modalities": ("text", "audio")}),
        ({"input_audio_format": "g711_ulaw"}, {"input_format": AudioFormat.PCMU}),
        ({"output_audio_format": "g711_alaw"}, {"output_format": AudioFormat.PCMA}),
        ({"input_audio_format": "pcm16"}, {"input_format": AudioFormat.PCM16}),
        ({"turn_detection": None}, {"turn_detection": None}),
        ({"turn_detection": {"type": "server_vad", "silence_duration_ms": 800,
                             "create_response": False, "interrupt_response": False}},
         {"turn_detection": TurnDetection(silence_duration_ms=800, create_response=False,
                                          interrupt_response=False)}),
        ({"turn_detection": {}}, {"turn_detection": TurnDetection()}),  # type defaults
        ({"input_audio_transcription": None}, {"transcription": None}),
        ({"max_response_output_tokens": 4096}, {"max_output_tokens": 4096}),
        ({"max_response_output_tokens": "inf"}, {"max_output_tokens": None}),
        # semantic_vad, both shapes; eagerness defaults to auto
        ({"turn_detection": {"type": "semantic_vad"}}, {"turn_detection": SEMANTIC}),
        ({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high",
                                                 "create_response": False}}}},
         {"turn_detection": replace(SEMANTIC, eagerness="high", create_response=False)}),
        ({"turn_detection": {"type": "semantic_vad", "eagerness": "low",
                             "interrupt_response": False}},
         {"turn_detection": replace(SEMANTIC, eagerness="low", interrupt_response=False)}),
        # server_vad's tuning does not belong to semantic_vad: ignored, not refused
        ({"turn_detection": {"type": "semantic_vad", "silence_duration_ms": "x",
                             "threshold": 9, "model_version": "v2"}},
         {"turn_detection": SEMANTIC}),
        # fields OpenAI has and the gateway does not use: accepted, ignored
        ({"tracing": "auto",
          "include": ["item.input_audio_transcription.logprobs"], "truncation": "auto",
          "prompt": {"id": "pmpt_1"}, "type": "realtime", "reasoning": {"effort": "low"},
          "audio": {"input": {"noise_reduction": {"type": "near_field"}},
                    "output": {"speed": 1.2}}}, {}),
        ({"tracing": {"workflow_name": "w", "group_id": "g"}}, {}),
        ({"tracing": None, "audio": {"input": {"noise_reduction": None}}}, {}),
        ({"audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe",
                                                "language": "en", "prompt": "names"}}}},
         {"transcription": "gpt-4o-mini-transcribe"}),
    ],
)
def test_apply_update_changes_only_present_fields(
    update: dict[str, Any], changes: dict[str, Any]
) -> None:
    out = apply_update(DEFAULT, update)
    for name in SessionConfig.__dataclass_fields__:
        expected = changes.get(name, getattr(DEFAULT, name))
        assert getattr(out, name) == expected, name


def test_turn_detection_update_is_relative_to_the_current_one() -> None:
    current = apply_update(DEFAULT, {"turn_detection": {"threshold": 0.9,
                                                        "interrupt_response": False}})
    out = apply_update(current, {"audio": {"input": {"turn_detection": {
        "silence_duration_ms": 700}}}})
    assert out.turn_detection == TurnDetection(threshold=0.9, interrupt_response=False,
                                               silence_duration_ms=700)


def test_turn_detection_from_none_starts_from_defaults() -> None:
    off = apply_update(DEFAULT, {"turn_detection": None})
    on = apply_update(off, {"turn_detection": {"threshold": 0.3}})
    assert on.turn_detection == TurnDetection(threshold=0.3)


@pytest.mark.parametrize(
    ("current", "update", "expected"),
    [
        # same type: only the fields present change
        (replace(SEMANTIC, eagerness="low", create_response=False), {"eagerness": "high"},
         replace(SEMANTIC, eagerness="high", create_response=False)),
        # no type named: the current type stays
        (SEMANTIC, {"interrupt_response": False}, replace(SEMANTIC, interrupt_response=False)),
        # another type: from that type's defaults
        (TurnDetection(threshold=0.9, silence_duration_ms=900), {"type": "semantic_vad"},
         SEMANTIC),
        (replace(SEMANTIC, eagerness="high", create_response=False), {"type": "server_vad"},
         TurnDetection()),
        (None, {"type": "semantic_vad", "eagerness": "medium"},
         replace(SEMANTIC, eagerness="medium")),
        (None, {"idle_timeout_ms": 4000}, TurnDetection(idle_timeout_ms=4000)),
        (TurnDetection(idle_timeout_ms=4000), {"idle_timeout_ms": None}, TurnDetection()),
    ],
)
def test_turn_detection_type_changes(current: TurnDetection | None, update: dict[str, Any],
                                     expected: TurnDetection) -> None:
    config = replace(DEFAULT, turn_detection=current)
    assert apply_update(config, {"turn_detection": update}).turn_detection == expected


@pytest.mark.parametrize("beta", [False, True])
def test_semantic_vad_is_echoed_as_set(beta: bool) -> None:
    config = apply_update(DEFAULT, {"turn_detection": {"type": "semantic_vad"}})
    wire = config.wire("sess_1", beta=beta)
    td = wire["turn_detection"] if beta else wire["audio"]["input"]["turn_detection"]  # type: ignore[index]
    assert td == {"type": "semantic_vad", "eagerness": "auto", "create_response": True,
                  "interrupt_response": True}


def test_update_does_not_mutate_the_old_config() -> None:
    before = SessionConfig(instructions="x")
    apply_update(before, {"instructions": "y", "voice": "z"})
    assert before == SessionConfig(instructions="x")


TD = "session.turn_detection"
GA_TD = "session.audio.input.turn_detection"


@pytest.mark.parametrize(
    ("update", "code", "param"),
    [
        ({"input_audio_format": "mp3"}, "invalid_value", "session.input_audio_format"),
        ({"output_audio_format": {"type": "audio/opus"}}, "invalid_value",
         "session.output_audio_format.type"),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
         "invalid_value", "session.audio.input.format.rate"),
        ({"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
         "invalid_value", "session.audio.input.format.rate"),
        ({"audio": {"output": {"format": {"rate": 24000}}}}, "invalid_value",
         "session.audio.output.format.type"),
        ({"audio": {"output": {"format": 5}}}, "invalid_value", "session.audio.output.format"),
        ({"model": 7}, "invalid_type", "session.model"),
        ({"voice": ["alloy"]}, "invalid_type", "session.voice"),
        ({"audio": {"output": {"voice": 1}}}, "invalid_type", "session.audio.output.voice"),
        ({"audio": {"input": {"transcription": {"model": {}}}}}, "invalid_type",
         "session.audio.input.transcription.model"),
        ({"audio": {"input": {"transcription": {"language": 5}}}}, "invalid_type",
         "session.audio.input.transcription.language"),
        ({"audio": {"input": {"transcription": "whisper"}}}, "invalid_type",
         "session.audio.input.transcription"),
        # turn detection: the type, then each field of that type
        ({"turn_detection": {"type": "smart_vad"}}, "invalid_value", f"{TD}.type"),
        ({"audio": {"input": {"turn_detection": {"type": "none"}}}}, "invalid_value",
         f"{GA_TD}.type"),
        ({"turn_detection": {"type": 1}}, "invalid_type", f"{TD}.type"),
        ({"turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}, "invalid_value",
         f"{TD}.eagerness"),
        ({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": 2}}}},
         "invalid_type", f"{GA_TD}.eagerness"),
        ({"turn_detection": {"type": "semantic_vad", "create_response": "yes"}},
         "invalid_type", f"{TD}.create_response"),
        ({"turn_detection": {"type": "semantic_vad", "interrupt_response": 0}},
         "invalid_type", f"{TD}.interrupt_response"),
        ({"turn_detection": {"threshold": 1.5}}, "decimal_above_max_value", f"{TD}.threshold"),
        ({"turn_detection": {"threshold": -0.1}}, "decimal_below_min_value",
         f"{TD}.threshold"),
        ({"turn_detection": {"threshold": "high"}}, "invalid_type", f"{TD}.threshold"),
        ({"turn_detection": {"threshold": True}}, "invalid_type", f"{TD}.threshold"),
        ({"turn_detection": {"threshold": float("nan")}}, "decimal_above_max_value",
         f"{TD}.threshold"),
        ({"audio": {"input": {"turn_detection": {"threshold": 2}}}},
         "decimal_above_max_value", f"{GA_TD}.threshold"),
        ({"turn_detection": {"silence_duration_ms": 20000}}, "integer_above_max_value",
         f"{TD}.silence_duration_ms"),
        ({"turn_detection": {"silence_duration_ms": 300.5}}, "invalid_type",
         f"{TD}.silence_duration_ms"),
        ({"turn_detection": {"prefix_padding_ms": -1}}, "integer_below_min_value",
         f"{TD}.prefix_padding_ms"),
        ({"turn_detection": {"create_response": "yes"}}, "invalid_type",
         f"{TD}.create_response"),
        ({"turn_detection": {"idle_timeout_ms": -1}}, "integer_below_min_value",
         f"{TD}.idle_timeout_ms"),
        ({"turn_detection": {"idle_timeout_ms": "soon"}}, "invalid_type",
         f"{TD}.idle_timeout_ms"),
        ({"turn_detection": "server_vad"}, "invalid_type", TD),
        ({"output_modalities": []}, "empty_array", "session.output_modalities"),
        ({"output_modalities": "audio"}, "invalid_type", "session.output_modalities"),
        ({"modalities": ["video"]}, "invalid_value", "session.modalities[0]"),
        ({"instructions": 3}, "invalid_type", "session.instructions"),
        ({"max_output_tokens": 0}, "integer_below_min_value", "session.max_output_tokens"),
        ({"max_output_tokens": 5000}, "integer_above_max_value", "session.max_output_tokens"),
        ({"max_output_tokens": True}, "invalid_type", "session.max_output_tokens"),
        ({"max_output_tokens": "lots"}, "invalid_value", "session.max_output_tokens"),
        ({"max_response_output_tokens": 0}, "integer_below_min_value",
         "session.max_response_output_tokens"),
        ({"audio": []}, "invalid_type", "session.audio"),
        ({"audio": {"input": 1}}, "invalid_type", "session.audio.input"),
    ],
)
def test_rejected_fields(update: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(replace(DEFAULT, instructions="kept"), {"instructions": "new", **update})
    assert info.value.code == code
    assert info.value.param == param
    assert info.value.error_type == "invalid_request_error"


def test_one_bad_field_rejects_the_whole_update() -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(DEFAULT, {"instructions": "new", "input_audio_format": "mp3"})
    assert info.value.param == "session.input_audio_format"
    assert "'mp3'" in info.value.message and "'audio/pcm'" in info.value.message
    assert "l16" not in info.value.message  # a client is told OpenAI's formats alone
    assert "l16" not in info.value.message  # a client is told OpenAI's formats alone


@pytest.mark.parametrize("session", [None, [], "x", 1])
def test_session_must_be_an_object(session: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(DEFAULT, session)
    assert info.value.param == "session"


@pytest.mark.parametrize(
    ("fmt", "rate", "width", "beta", "wire"),
    [
        (AudioFormat.PCM16, 24000, 2, "pcm16", {"type": "audio/pcm", "rate": 24000}),
        (AudioFormat.PCMU, 8000, 1, "g711_ulaw", {"type": "audio/pcmu"}),
        (AudioFormat.PCMA, 8000, 1, "g711_alaw", {"type": "audio/pcma"}),
        # a carrier bridge's formats have no beta name of OpenAI's: theirs is their type
        (AudioFormat.L16_8K, 8000, 2, "audio/l16;rate=8000", {"type": "audio/l16;rate=8000"}),
        (AudioFormat.L16_16K, 16000, 2, "audio/l16;rate=16000",
         {"type": "audio/l16;rate=16000"}),
    ],
)
def test_format_wire_round_trips(fmt: AudioFormat, rate: int, width: int, beta: str,
                                 wire: dict[str, object]) -> None:
    assert (fmt.rate, fmt.bytes_per_sample, fmt.beta_name) == (rate, width, beta)
    assert fmt.wire() == wire
    assert parse_format(fmt.wire(), "p") is fmt
    assert parse_format(fmt.beta_name, "p") is fmt
    assert parse_format(fmt.value, "p") is fmt


CUSTOM = SessionConfig(
    model="m", instructions="Speak like a pirate.", output_modalities=("text",),
    input_format=AudioFormat.PCMU, output_format=AudioFormat.PCMA,
    turn_detection=TurnDetection(threshold=0.7, prefix_padding_ms=100,
                                 silence_duration_ms=900, create_response=False,
                                 interrupt_response=False, idle_timeout_ms=5000),
    voice="v", transcription="whisper-1", max_output_tokens=256,
)


SEMANTIC_CUSTOM = replace(CUSTOM, turn_detection=replace(SEMANTIC, eagerness="low",
                                                         interrupt_response=False))
ROUND_TRIPS = [DEFAULT, CUSTOM, SEMANTIC_CUSTOM,
               SessionConfig(turn_detection=None, transcription=None)]


@pytest.mark.parametrize("config", ROUND_TRIPS)
def test_ga_wire_round_trips(config: SessionConfig) -> None:
    wire = config.wire("sess_1")
    assert wire["type"] == "realtime" and wire["id"] == "sess_1"
    assert apply_update(SessionConfig(), wire) == config


@pytest.mark.parametrize("config", ROUND_TRIPS)
def test_beta_wire_round_trips(config: SessionConfig) -> None:
    wire = config.wire("sess_1", beta=True)
    modalities = wire["modalities"]
    assert isinstance(modalities, list) and "text" in modalities  # beta always lists text
    back = apply_update(SessionConfig(), wire)
    assert back.output_modalities == tuple(modalities)
    assert back.output_format is config.output_format
    assert back.input_format is config.input_format
    assert replace(back, output_modalities=config.output_modalities) == config
