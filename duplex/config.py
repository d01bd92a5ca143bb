"""The session configuration a client negotiates with ``session.update``.

Accepts both OpenAI Realtime shapes: GA (``audio.input.format{type,rate}``,
``output_modalities``) and beta (``input_audio_format: "pcm16"``,
``modalities``, top-level ``turn_detection``). Only fields present change.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from duplex.errors import InvalidRequest


class AudioFormat(enum.StrEnum):
    PCM16 = "audio/pcm"  # 24 kHz little-endian 16-bit mono
    PCMU = "audio/pcmu"  # G.711 μ-law 8 kHz
    PCMA = "audio/pcma"  # G.711 A-law 8 kHz

    @property
    def rate(self) -> int:
        return 24000 if self is AudioFormat.PCM16 else 8000

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self is AudioFormat.PCM16 else 1

    @property
    def beta_name(self) -> str:
        return {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}[
            self.value
        ]

    def wire(self) -> dict[str, object]:
        if self is AudioFormat.PCM16:
            return {"type": self.value, "rate": self.rate}
        return {"type": self.value}


_FORMAT_NAMES: Mapping[str, AudioFormat] = {
    "audio/pcm": AudioFormat.PCM16, "pcm16": AudioFormat.PCM16,
    "audio/pcmu": AudioFormat.PCMU, "g711_ulaw": AudioFormat.PCMU,
    "audio/pcma": AudioFormat.PCMA, "g711_alaw": AudioFormat.PCMA,
}


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """``server_vad``: the server ends user turns and may interrupt responses."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None

    def wire(self) -> dict[str, object]:
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
            "idle_timeout_ms": self.idle_timeout_ms,
        }


@dataclass(frozen=True, slots=True)
class SessionConfig:
    model: str = "duplex-gateway"
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = AudioFormat.PCM16
    output_format: AudioFormat = AudioFormat.PCM16
    turn_detection: TurnDetection | None = TurnDetection()
    voice: str = "default"
    # model name; None = no user transcripts. On by default: a voice gateway's users
    # expect to see what they said (OpenAI's default is off).
    transcription: str | None = "default"
    max_output_tokens: int | None = None

    def wire(self, session_id: str, *, beta: bool = False) -> dict[str, object]:
        td = self.turn_detection.wire() if self.turn_detection else None
        transcription = {"model": self.transcription} if self.transcription else None
        if beta:
            return {
                "id": session_id, "object": "realtime.session", "model": self.model,
                "modalities": list(self.output_modalities) + (
                    ["text"] if "text" not in self.output_modalities else []),
                "instructions": self.instructions, "voice": self.voice,
                "input_audio_format": self.input_format.beta_name,
                "output_audio_format": self.output_format.beta_name,
                "turn_detection": td, "input_audio_transcription": transcription,
                "max_response_output_tokens": self.max_output_tokens or "inf",
            }
        return {
            "type": "realtime", "id": session_id, "object": "realtime.session",
            "model": self.model, "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "audio": {
                "input": {"format": self.input_format.wire(), "turn_detection": td,
                          "transcription": transcription, "noise_reduction": None},
                "output": {"format": self.output_format.wire(), "voice": self.voice,
                           "speed": 1.0},
            },
            "max_output_tokens": self.max_output_tokens or "inf",
            "tools": [], "tool_choice": "auto",
        }


def _obj(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"{param} must be an object", param=param)
    return value


def parse_format(value: object, param: str) -> AudioFormat:
    """An audio format given as a beta string or a GA ``{type, rate}`` object."""
    name: object = value
    rate: object = None
    if isinstance(value, Mapping):
        name, rate = value.get("type"), value.get("rate")
    if not isinstance(name, str) or name not in _FORMAT_NAMES:
        raise InvalidRequest(
            f"unsupported audio format {name!r}; use audio/pcm, audio/pcmu or audio/pcma",
            code="unsupported_audio_format", param=param,
        )
    fmt = _FORMAT_NAMES[name]
    if rate is not None and rate != fmt.rate:
        raise InvalidRequest(
            f"{fmt.value} is {fmt.rate} Hz, not {rate!r}",
            code="unsupported_audio_format", param=param,
        )
    return fmt


def _number(obj: Mapping[str, Any], key: str, current: float, lo: float, hi: float,
            param: str) -> float:
    value = obj.get(key, current)
    if value is None:
        return current
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise InvalidRequest(f"{param}.{key} must be a number in [{lo}, {hi}]",
                             param=f"{param}.{key}")
    return float(value)


def _flag(obj: Mapping[str, Any], key: str, current: bool, param: str) -> bool:
    value = obj.get(key, current)
    if not isinstance(value, bool):
        raise InvalidRequest(f"{param}.{key} must be a boolean", param=f"{param}.{key}")
    return value


def parse_turn_detection(
    value: object, current: TurnDetection | None, param: str
) -> TurnDetection | None:
    if value is None:
        return None
    obj = _obj(value, param)
    kind = obj.get("type", "server_vad")
    if kind != "server_vad":
        raise InvalidRequest(f"turn_detection type {kind!r} is not supported; use server_vad",
                             code="unsupported_turn_detection", param=f"{param}.type")
    base = current or TurnDetection()
    idle = obj.get("idle_timeout_ms", base.idle_timeout_ms)
    if idle is not None and (not isinstance(idle, int) or isinstance(idle, bool) or idle < 0):
        raise InvalidRequest(f"{param}.idle_timeout_ms must be a non-negative integer",
                             param=f"{param}.idle_timeout_ms")
    return TurnDetection(
        threshold=_number(obj, "threshold", base.threshold, 0.0, 1.0, param),
        prefix_padding_ms=int(_number(obj, "prefix_padding_ms", base.prefix_padding_ms,
                                      0, 5000, param)),
        silence_duration_ms=int(_number(obj, "silence_duration_ms", base.silence_duration_ms,
                                        0, 10000, param)),
        create_response=_flag(obj, "create_response", base.create_response, param),
        interrupt_response=_flag(obj, "interrupt_response", base.interrupt_response, param),
        idle_timeout_ms=idle,
    )


def _modalities(value: object, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or any(
        m not in ("audio", "text") for m in value
    ):
        raise InvalidRequest(f"{param} must be a list of 'audio' and/or 'text'", param=param)
    return tuple(dict.fromkeys(value))


def _transcription(value: object, param: str) -> str | None:
    if value is None:
        return None
    obj = _obj(value, param)
    return _text(obj, "model", "default", param) or "default"


def _text(obj: Mapping[str, Any], key: str, current: str, param: str) -> str:
    """A string field; absent or null keeps ``current``."""
    value = obj.get(key)
    if value is None:
        return current
    if not isinstance(value, str):
        raise InvalidRequest(f"{param}.{key} must be a string", param=f"{param}.{key}")
    return value


def apply_update(config: SessionConfig, session: object) -> SessionConfig:
    """The config after a ``session.update``; raises ``InvalidRequest`` on bad fields."""
    obj = _obj(session, "session")
    changes: dict[str, Any] = {}
    if "instructions" in obj:
        if not isinstance(obj["instructions"], str):
            raise InvalidRequest("session.instructions must be a string",
                                 param="session.instructions")
        changes["instructions"] = obj["instructions"]
    changes["model"] = _text(obj, "model", config.model, "session")
    for key in ("output_modalities", "modalities"):
        if key in obj:
            changes["output_modalities"] = _modalities(obj[key], f"session.{key}")
    changes["voice"] = _text(obj, "voice", config.voice, "session")
    if "max_output_tokens" in obj or "max_response_output_tokens" in obj:
        raw = obj.get("max_output_tokens", obj.get("max_response_output_tokens"))
        if raw == "inf" or raw is None:
            changes["max_output_tokens"] = None
        elif isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= 4096:
            changes["max_output_tokens"] = raw
        else:
            raise InvalidRequest("max_output_tokens must be 1..4096 or 'inf'",
                                 param="session.max_output_tokens")
    # beta shape
    if "input_audio_format" in obj:
        changes["input_format"] = parse_format(obj["input_audio_format"],
                                               "session.input_audio_format")
    if "output_audio_format" in obj:
        changes["output_format"] = parse_format(obj["output_audio_format"],
                                                "session.output_audio_format")
    if "turn_detection" in obj:
        changes["turn_detection"] = parse_turn_detection(
            obj["turn_detection"], config.turn_detection, "session.turn_detection")
    if "input_audio_transcription" in obj:
        changes["transcription"] = _transcription(obj["input_audio_transcription"],
                                                  "session.input_audio_transcription")
    # GA shape
    if "audio" in obj:
        audio = _obj(obj["audio"], "session.audio")
        if "input" in audio:
            inp = _obj(audio["input"], "session.audio.input")
            if "format" in inp:
                changes["input_format"] = parse_format(inp["format"],
                                                       "session.audio.input.format")
            if "turn_detection" in inp:
                changes["turn_detection"] = parse_turn_detection(
                    inp["turn_detection"], config.turn_detection,
                    "session.audio.input.turn_detection")
            if "transcription" in inp:
                changes["transcription"] = _transcription(
                    inp["transcription"], "session.audio.input.transcription")
        if "output" in audio:
            out = _obj(audio["output"], "session.audio.output")
            if "format" in out:
                changes["output_format"] = parse_format(out["format"],
                                                        "session.audio.output.format")
            changes["voice"] = _text(out, "voice", changes.get("voice", config.voice),
                                     "session.audio.output")
    return replace(config, **changes)
