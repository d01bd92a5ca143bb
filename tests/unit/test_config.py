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


def test_update_does_not_mutate_the_old_config() -> None:
    before = SessionConfig(instructions="x")
    apply_update(before, {"instructions": "y", "voice": "z"})
    assert before == SessionConfig(instructions="x")


@pytest.mark.parametrize(
    ("update", "code", "param"),
    [
        ({"input_audio_format": "mp3"}, "unsupported_audio_format",
         "session.input_audio_format"),
        ({"output_audio_format": {"type": "audio/opus"}}, "unsupported_audio_format",
         "session.output_audio_format"),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
         "unsupported_audio_format", "session.audio.input.format"),
        ({"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
         "unsupported_audio_format", "session.audio.input.format"),
        ({"audio": {"output": {"format": {"rate": 24000}}}}, "unsupported_audio_format",
         "session.audio.output.format"),
        ({"audio": {"output": {"format": 5}}}, "unsupported_audio_format",
         "session.audio.output.format"),
        ({"model": 7}, "invalid_request", "session.model"),
        ({"voice": ["alloy"]}, "invalid_request", "session.voice"),
        ({"audio": {"output": {"voice": 1}}}, "invalid_request", "session.audio.output.voice"),
        ({"audio": {"input": {"transcription": {"model": {}}}}}, "invalid_request",
         "session.audio.input.transcription.model"),
        ({"turn_detection": {"type": "semantic_vad"}}, "unsupported_turn_detection",
         "session.turn_detection.type"),
        ({"audio": {"input": {"turn_detection": {"type": "none"}}}},
         "unsupported_turn_detection", "session.audio.input.turn_detection.type"),
        ({"turn_detection": {"threshold": 1.5}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"turn_detection": {"threshold": -0.1}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"turn_detection": {"threshold": "high"}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"turn_detection": {"threshold": True}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"turn_detection": {"threshold": float("nan")}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"audio": {"input": {"turn_detection": {"threshold": 2}}}}, "invalid_request",
         "session.audio.input.turn_detection.threshold"),
        ({"turn_detection": {"silence_duration_ms": 20000}}, "invalid_request",
         "session.turn_detection.silence_duration_ms"),
        ({"turn_detection": {"create_response": "yes"}}, "invalid_request",
         "session.turn_detection.create_response"),
        ({"turn_detection": {"idle_timeout_ms": -1}}, "invalid_request",
         "session.turn_detection.idle_timeout_ms"),
        ({"turn_detection": "server_vad"}, "invalid_request", "session.turn_detection"),
        ({"output_modalities": []}, "invalid_request", "session.output_modalities"),
        ({"modalities": ["video"]}, "invalid_request", "session.modalities"),
        ({"instructions": 3}, "invalid_request", "session.instructions"),
        ({"max_output_tokens": 0}, "invalid_request", "session.max_output_tokens"),
        ({"max_output_tokens": 5000}, "invalid_request", "session.max_output_tokens"),
        ({"max_output_tokens": True}, "invalid_request", "session.max_output_tokens"),
        ({"audio": []}, "invalid_request", "session.audio"),
        ({"audio": {"input": 1}}, "invalid_request", "session.audio.input"),
    ],
)
def test_rejected_fields(update: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        apply_update(DEFAULT, update)
    assert info.value.code == code
    assert info.value.param == param
    assert info.value.error_type == "invalid_request_error"


def test_one_bad_field_rejects_the_whole_update() -> None:
    with pytest.raises(InvalidRequest):
        apply_update(DEFAULT, {"instructions": "new", "input_audio_format": "mp3"})


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


@pytest.mark.parametrize("config", [DEFAULT, CUSTOM, SessionConfig(turn_detection=None,
                                                                   transcription=None)])
def test_ga_wire_round_trips(config: SessionConfig) -> None:
    wire = config.wire("sess_1")
    assert wire["type"] == "realtime" and wire["id"] == "sess_1"
    assert apply_update(SessionConfig(), wire) == config


@pytest.mark.parametrize("config", [DEFAULT, CUSTOM, SessionConfig(turn_detection=None,
                                                                   transcription=None)])
def test_beta_wire_round_trips(config: SessionConfig) -> None:
    wire = config.wire("sess_1", beta=True)
    modalities = wire["modalities"]
    assert isinstance(modalities, list) and "text" in modalities  # beta always lists text
    back = apply_update(SessionConfig(), wire)
    assert back.output_modalities == tuple(modalities)
    assert back.output_format is config.output_format
    assert back.input_format is config.input_format
    assert replace(back, output_modalities=config.output_modalities) == config
