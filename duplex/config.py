"""The session configuration a client negotiates with ``session.update``.

Accepts both OpenAI Realtime shapes: GA (``audio.input.format{type,rate}``,
``output_modalities``) and beta (``input_audio_format: "pcm16"``,
``modalities``, top-level ``turn_detection``). Only fields present change.

An update is all or nothing: the first bad field raises ``InvalidRequest``
naming it (``param``, OpenAI's codes: ``duplex.fields``) and the config stays
as it was. Fields OpenAI defines that the gateway has no use for (``tracing``,
``noise_reduction``, ``speed``, ``truncation``,
``prompt``, ``include``, ``reasoning``, transcription ``language``/``prompt``
…) are accepted and ignored, so a client's defaults never cost it the rest
of its update; ``session.updated`` shows what is in effect.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from duplex import fields as f
from duplex import limits
from duplex.errors import InvalidRequest
from duplex.tools import NO_TOOLS, ToolSet, update_toolset
from duplex.turn_detection import TurnDetection, parse_turn_detection

__all__ = ["AudioFormat", "SessionConfig", "TurnDetection", "apply_update", "parse_format",
           "parse_turn_detection", "stored_size"]


class AudioFormat(enum.StrEnum):
    PCM16 = "audio/pcm"  # 24 kHz little-endian 16-bit mono
    PCMU = "audio/pcmu"  # G.711 μ-law 8 kHz
    PCMA = "audio/pcma"  # G.711 A-law 8 kHz
    # Linear 16-bit little-endian PCM at a carrier's rate (Exotel, Vonage): not
    # OpenAI's formats, so a bridge's own session.update names them, and a client's
    # bad format is told OpenAI's names alone.
    L16_8K = "audio/l16;rate=8000"
    L16_16K = "audio/l16;rate=16000"

    @property
    def rate(self) -> int:
        return _RATES.get(self, 8000)

    @property
    def bytes_per_sample(self) -> int:
        return 1 if self in (AudioFormat.PCMU, AudioFormat.PCMA) else 2

    @property
    def beta_name(self) -> str:
        return _BETA_NAMES.get(self.value, self.value)

    def wire(self) -> dict[str, object]:
        if self is AudioFormat.PCM16:
            return {"type": self.value, "rate": self.rate}
        return {"type": self.value}


_RATES: Mapping[AudioFormat, int] = {AudioFormat.PCM16: 24000, AudioFormat.L16_16K: 16000}
_BETA_NAMES: Mapping[str, str] = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw",
                                  "audio/pcma": "g711_alaw"}
_FORMAT_NAMES: Mapping[str, AudioFormat] = {
    "audio/pcm": AudioFormat.PCM16, "pcm16": AudioFormat.PCM16,
    "audio/pcmu": AudioFormat.PCMU, "g711_ulaw": AudioFormat.PCMU,
    "audio/pcma": AudioFormat.PCMA, "g711_alaw": AudioFormat.PCMA,
}
_CARRIER_FORMATS: Mapping[str, AudioFormat] = {
    fmt.value: fmt for fmt in (AudioFormat.L16_8K, AudioFormat.L16_16K)}


DEFAULT_MODEL = "duplex-gateway"
SERVER_VAD = TurnDetection()  # the default: frozen, so one instance serves every config


@dataclass(frozen=True, slots=True)
class SessionConfig:
    model: str = DEFAULT_MODEL
    instructions: str = ""
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = AudioFormat.PCM16
    output_format: AudioFormat = AudioFormat.PCM16
    turn_detection: TurnDetection | None = SERVER_VAD
    voice: str = "default"
    # model name; None = no user transcripts. On by default: a voice gateway's users
    # expect to see what they said (OpenAI's default is off).
    transcription: str | None = "default"
    max_output_tokens: int | None = None
    tools: ToolSet = NO_TOOLS
    # "realtime" (a conversation) or "transcription" (the user's words only, no replies)
    kind: str = "realtime"

    @property
    def transcribing_only(self) -> bool:
        return self.kind == "transcription"

    def wire(self, session_id: str, *, beta: bool = False) -> dict[str, object]:
        td = self.turn_detection.wire() if self.turn_detection else None
        transcription = {"model": self.transcription} if self.transcription else None
        if self.transcribing_only:
            return self._transcription_wire(session_id, td, transcription, beta=beta)
        if beta:
            # beta's session.model is one of OpenAI's names: the gateway's own
            # default is left out (the field is optional), a client's choice echoed
            model = {} if self.model == DEFAULT_MODEL else {"model": self.model}
            return {
                "id": session_id, "object": "realtime.session", **model,
                "modalities": list(self.output_modalities) + (
                    ["text"] if "text" not in self.output_modalities else []),
                "instructions": self.instructions, "voice": self.voice,
                "input_audio_format": self.input_format.beta_name,
                "output_audio_format": self.output_format.beta_name,
                "turn_detection": td, "input_audio_transcription": transcription,
                "max_response_output_tokens": self.max_output_tokens or "inf",
                **self._tools_wire(),
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
            **self._tools_wire(), "parallel_tool_calls": self.tools.parallel,
        }

    def _transcription_wire(self, session_id: str, td: object, transcription: object, *,
                            beta: bool) -> dict[str, object]:
        """A transcription session's object: its input alone (OpenAI's shapes)."""
        if beta:
            return {"id": session_id, "object": "realtime.transcription_session",
                    "modalities": ["text"], "input_audio_format": self.input_format.beta_name,
                    "input_audio_transcription": transcription, "turn_detection": td}
        return {"type": "transcription", "id": session_id,
                "object": "realtime.transcription_session",
                "audio": {"input": {"format": self.input_format.wire(), "turn_detection": td,
                                    "transcription": transcription, "noise_reduction": None}},
                "include": []}

    def _tools_wire(self) -> dict[str, object]:
        return {"tools": [t.wire() for t in self.tools.tools],
                "tool_choice": self.tools.choice.wire()}


def stored_size(config: SessionConfig, session_id: str) -> int:
    """Bytes the store keeps for ``config``: the JSON text of its wire form
    (``gateway.session.history``'s ``SaveConfig``)."""
    return len(json.dumps(config.wire(session_id)))


def parse_format(value: object, param: str) -> AudioFormat:
    """An audio format given as a beta string or a GA ``{type, rate}`` object."""
    name: object = value
    rate: object = None
    if isinstance(value, Mapping):
        name, rate = value.get("type"), value.get("rate")
        param = f"{param}.type"
    fmt = (_FORMAT_NAMES.get(name) or _CARRIER_FORMATS.get(name)
           if isinstance(name, str) else None)
    if fmt is None:
        raise f.wrong_value(param, name, _FORMAT_NAMES)
    if rate is not None and rate != fmt.rate:
        raise f.wrong_value(param.removesuffix(".type") + ".rate", rate, [str(fmt.rate)])
    return fmt


def _modalities(value: object, param: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise f.wrong_type(param, "an array", value)
    for i, mode in enumerate(value):
        if mode not in ("audio", "text"):
            raise f.wrong_value(f"{param}[{i}]", mode, ("audio", "text"))
    if not value:
        raise InvalidRequest(f"Invalid '{param}': empty array. Expected one of 'audio' or "
                             "'text'.", code="empty_array", param=param)
    return tuple(dict.fromkeys(value))


def _transcription(value: object, param: str) -> str | None:
    if value is None:
        return None
    obj = f.obj(value, param)
    # not used, but a wrong type or length is still wrong
    limits.bounded(f.text(obj, "language", "", param), limits.WORD, f"{param}.language")
    limits.bounded(f.text(obj, "prompt", "", param), limits.TRANSCRIPTION_PROMPT,
                   f"{param}.prompt")
    return _word(obj, "model", "default", param) or "default"


def _word(obj: Mapping[str, Any], key: str, current: str, parent: str) -> str:
    """A name (model, voice): a string of at most ``limits.WORD``."""
    return limits.bounded(f.text(obj, key, current, parent), limits.WORD, f.path(parent, key))


def _max_tokens(raw: object, param: str) -> int | None:
    if raw == "inf" or raw is None:
        return None
    if isinstance(raw, str):
        raise f.wrong_value(param, raw, ("inf",))
    return int(f.number({param: raw}, param, 0, 1, 4096, "", integer=True))


def _beta_fields(obj: Mapping[str, Any], config: SessionConfig,
                 changes: dict[str, Any]) -> None:
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


def _audio_input(inp: Mapping[str, Any], config: SessionConfig,
                 changes: dict[str, Any]) -> None:
    where = "session.audio.input"
    if "format" in inp:
        changes["input_format"] = parse_format(inp["format"], f"{where}.format")
    if "turn_detection" in inp:
        changes["turn_detection"] = parse_turn_detection(
            inp["turn_detection"], config.turn_detection, f"{where}.turn_detection")
    if "transcription" in inp:
        changes["transcription"] = _transcription(inp["transcription"],
                                                  f"{where}.transcription")


def _audio_output(out: Mapping[str, Any], config: SessionConfig,
                  changes: dict[str, Any]) -> None:
    where = "session.audio.output"
    if "format" in out:
        changes["output_format"] = parse_format(out["format"], f"{where}.format")
    changes["voice"] = _word(out, "voice", changes.get("voice", config.voice), where)


def apply_update(config: SessionConfig, session: object) -> SessionConfig:
    """The config after a ``session.update``; raises ``InvalidRequest`` on bad fields."""
    obj = f.obj(session, "session")
    changes: dict[str, Any] = {}
    if "instructions" in obj:
        changes["instructions"] = limits.bounded(
            f.text(obj, "instructions", config.instructions, "session"), limits.INSTRUCTIONS,
            "session.instructions")
    changes["model"] = _word(obj, "model", config.model, "session")
    for key in ("output_modalities", "modalities"):
        if key in obj:
            changes["output_modalities"] = _modalities(obj[key], f"session.{key}")
    changes["voice"] = _word(obj, "voice", config.voice, "session")
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if key in obj:
            changes["max_output_tokens"] = _max_tokens(obj[key], f"session.{key}")
    changes["tools"] = update_toolset(config.tools, obj, "session")
    changes["kind"] = f.choice(obj, "type", config.kind, ("realtime", "transcription"),
                               "session")
    _beta_fields(obj, config, changes)
    if "audio" in obj:
        audio = f.obj(obj["audio"], "session.audio")
        if "input" in audio:
            _audio_input(f.obj(audio["input"], "session.audio.input"), config, changes)
        if "output" in audio:
            _audio_output(f.obj(audio["output"], "session.audio.output"), config, changes)
    if changes["kind"] == "transcription" and changes.get("transcription",
                                                          config.transcription) is None:
        changes["transcription"] = "default"  # what a transcription session is for
    return replace(config, **changes)
