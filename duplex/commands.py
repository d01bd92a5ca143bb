"""Client → server vocabulary: frozen commands parsed from wire objects.

``parse_command`` either returns one of the commands below or raises
``InvalidRequest`` with an upstream/OpenAI error code; it never raises anything
else for any JSON object (a property test checks this).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from duplex import fields as f
from duplex import limits, speedups
from duplex.errors import InvalidRequest
from duplex.tools import Tool, ToolChoice, parse_tool_choice, parse_tools


@dataclass(frozen=True, slots=True)
class Command:
    event_id: str | None


@dataclass(frozen=True, slots=True)
class UpdateSession(Command):
    session: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AppendAudio(Command):
    audio: bytes  # encoded in the session's input format


@dataclass(frozen=True, slots=True)
class CommitInput(Command):
    pass


@dataclass(frozen=True, slots=True)
class ClearInput(Command):
    pass


@dataclass(frozen=True, slots=True)
class CreateResponse(Command):
    instructions: str | None
    output_modalities: tuple[str, ...] | None
    metadata: Mapping[str, Any] | None
    out_of_band: bool  # conversation: "none"
    tools: tuple[Tool, ...] | None = None  # None: the session's
    tool_choice: ToolChoice | None = None  # None: the session's
    parallel_tool_calls: bool | None = None  # None: the session's
    # the reply's own context (inline items, item_references), in place of the
    # conversation; None: the conversation
    input: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class CancelResponse(Command):
    response_id: str | None


@dataclass(frozen=True, slots=True)
class ClearOutputAudio(Command):
    pass


@dataclass(frozen=True, slots=True)
class CreateItem(Command):
    item: Mapping[str, Any]
    previous_item_id: str | None


@dataclass(frozen=True, slots=True)
class RetrieveItem(Command):
    item_id: str


@dataclass(frozen=True, slots=True)
class DeleteItem(Command):
    item_id: str


@dataclass(frozen=True, slots=True)
class TruncateItem(Command):
    item_id: str
    content_index: int
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class PlaybackAck(Command):
    played_ms: float
    response_id: str | None
    item_id: str | None
    truncate: bool


@dataclass(frozen=True, slots=True)
class Heartbeat(Command):
    pass


@dataclass(frozen=True, slots=True)
class DtmfReceived(Command):
    """A keypad digit from a telephony transport (not a client wire event)."""

    digit: str
    received_at: float  # unix seconds, when the transport received it


@dataclass(frozen=True, slots=True)
class AckEvents(Command):
    server_event_seq: int


@dataclass(frozen=True, slots=True)
class CloseSession(Command):
    reason: str


@dataclass(frozen=True, slots=True)
class ResumeSession(Command):
    session_id: str | None
    resume_token: str
    last_received_server_event_seq: int


# -- field helpers -----------------------------------------------------------


def _str(obj: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{key}'.",
                             code="missing_required_parameter", param=key)
    if not isinstance(value, str):
        raise f.wrong_type(key, "a string", value)
    if required and not value:
        raise InvalidRequest(f"Invalid '{key}': empty string.", code="invalid_value", param=key)
    return value


def _int(obj: Mapping[str, Any], key: str, *, minimum: int = 0,
         default: int | None = None) -> int:
    value = obj.get(key, default)
    if value is None:
        raise InvalidRequest(f"'{key}' is missing", code="missing_required_parameter",
                             param=key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise f.wrong_type(key, "an integer", value)
    if value < minimum:
        raise f.out_of_range(key, value, minimum, math.inf, integer=True)
    return value


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        raise InvalidRequest(f"'{key}' is missing", code="missing_required_parameter",
                             param=key)
    return f.obj(value, key)


def decode_base64_audio(value: object) -> bytes:
    if value is None:
        raise InvalidRequest("Missing required parameter: 'audio'.",
                             code="missing_required_parameter", param="audio")
    if not isinstance(value, str):
        raise f.wrong_type("audio", "a base64 string", value)
    fast = speedups.base64_decode
    if fast is not None:
        try:
            return fast(value)
        except ValueError:
            pass  # the stdlib takes forms pybase64 refuses (excess padding): the same answer
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("'audio' is not valid base64", code="invalid_base64",
                             param="audio") from None


# -- parsers -------------------------------------------------------------------

Parser = Callable[[Mapping[str, Any], str | None], Command]


def _response_create(obj: Mapping[str, Any], eid: str | None) -> Command:
    opts = obj.get("response") or {}
    opts = f.obj(opts, "response")
    instructions = opts.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise f.wrong_type("response.instructions", "a string", instructions)
    if instructions is not None:
        limits.bounded(instructions, limits.INSTRUCTIONS, "response.instructions")
    mods = opts.get("output_modalities", opts.get("modalities"))
    if mods is not None and (not isinstance(mods, list)
                             or any(m not in ("audio", "text") for m in mods) or not mods):
        raise InvalidRequest("response.output_modalities must list 'audio' and/or 'text'",
                             code="invalid_value", param="response.output_modalities")
    metadata = opts.get("metadata")
    if metadata is not None:
        metadata = limits.metadata(f.obj(metadata, "response.metadata"), "response.metadata")
    conversation = opts.get("conversation", "auto")
    if conversation not in ("auto", "none"):
        raise InvalidRequest("response.conversation must be 'auto' or 'none'",
                             code="invalid_value", param="response.conversation")
    tools = opts.get("tools")
    choice = opts.get("tool_choice")
    given = opts.get("input")
    if given is not None and not isinstance(given, list):
        raise f.wrong_type("response.input", "an array", given)
    parallel = opts.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise f.wrong_type("response.parallel_tool_calls", "a boolean", parallel)
    return CreateResponse(
        eid, instructions, tuple(mods) if mods else None, metadata,
        out_of_band=conversation == "none",
        tools=None if tools is None else parse_tools(tools, "response.tools"),
        tool_choice=None if choice is None else parse_tool_choice(choice,
                                                                  "response.tool_choice"),
        parallel_tool_calls=parallel,
        input=None if given is None else tuple(
            f.obj(item, f"response.input[{i}]") for i, item in enumerate(given)),
    )


def _finite(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` (bools, NaN, ±inf, huge ints)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _playback_ack(obj: Mapping[str, Any], eid: str | None) -> Command:
    played = _finite(obj.get("played_ms"))
    if played is None or played < 0:
        raise InvalidRequest("'played_ms' must be a number >= 0", code="invalid_value",
                             param="played_ms")
    truncate = obj.get("truncate", False)
    if not isinstance(truncate, bool):
        raise InvalidRequest("'truncate' must be a boolean", code="invalid_value",
                             param="truncate")
    return PlaybackAck(eid, played, _str(obj, "response_id", required=False),
                       _str(obj, "item_id", required=False), truncate)


def _resume(obj: Mapping[str, Any], eid: str | None) -> Command:
    token = _str(obj, "resume_token")
    assert token is not None
    return ResumeSession(eid, _str(obj, "session_id", required=False), token,
                         _int(obj, "last_received_server_event_seq", default=0))


def _item_id(obj: Mapping[str, Any]) -> str:
    value = _str(obj, "item_id")
    assert value is not None
    return value


_PARSERS: Mapping[str, Parser] = {
    "session.update": lambda o, e: UpdateSession(e, _mapping(o, "session")),
    # beta's update of a transcription session: the same fields, the type implied
    "transcription_session.update": lambda o, e: UpdateSession(
        e, {**_mapping(o, "session"), "type": "transcription"}),
    "input_audio_buffer.append": lambda o, e: AppendAudio(e, decode_base64_audio(o.get("audio"))),
    "input_audio_buffer.commit": lambda o, e: CommitInput(e),
    "input_audio_buffer.clear": lambda o, e: ClearInput(e),
    "response.create": _response_create,
    "response.cancel": lambda o, e: CancelResponse(e, _str(o, "response_id", required=False)),
    "output_audio_buffer.clear": lambda o, e: ClearOutputAudio(e),
    "conversation.item.create": lambda o, e: CreateItem(
        e, _mapping(o, "item"), _str(o, "previous_item_id", required=False)),
    "conversation.item.retrieve": lambda o, e: RetrieveItem(e, _item_id(o)),
    "conversation.item.delete": lambda o, e: DeleteItem(e, _item_id(o)),
    "conversation.item.truncate": lambda o, e: TruncateItem(
        e, _item_id(o), _int(o, "content_index", default=0), _int(o, "audio_end_ms")),
    "playback.ack": _playback_ack,
    "session.heartbeat": lambda o, e: Heartbeat(e),
    "session.event_ack": lambda o, e: AckEvents(e, _int(o, "server_event_seq")),
    "session.close": lambda o, e: CloseSession(
        e, _str(o, "reason", required=False) or "client_close"),
    "session.resume": _resume,
}

COMMAND_TYPES: frozenset[str] = frozenset(_PARSERS)


def parse_command(obj: object) -> Command:
    """Parse one decoded JSON client event."""
    # a JSON object is a dict, checked first: an isinstance of the Mapping ABC is slow
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise InvalidRequest("a client event must be a JSON object", code="invalid_event")
    raw_id = obj.get("event_id")
    event_id = raw_id if isinstance(raw_id, str) else None
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise InvalidRequest("client event has no 'type'", code="missing_required_parameter",
                             param="type", event_id=event_id)
    parser = _PARSERS.get(kind)
    if parser is None:  # OpenAI's answer, word for word but for our list
        supported = ", ".join(f"'{name}'" for name in _PARSERS)
        raise InvalidRequest(f"Invalid value: {kind!r}. Supported values are: {supported}.",
                             code="invalid_value", param="type", event_id=event_id)
    try:
        return parser(obj, event_id)
    except InvalidRequest as exc:
        exc.event_id = event_id
        raise
