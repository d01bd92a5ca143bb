"""Server → client vocabulary: event names, item and response objects.

The core builds GA-dialect events (research/peers.md §3.1); ``to_beta`` renames
them for clients that asked for the beta protocol (``OpenAI-Beta: realtime=v1``).
Events are plain JSON-able dicts because they go to the journal and the wire
as they are; their *names* are a closed vocabulary.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

Event = dict[str, Any]


class ServerEvent(enum.StrEnum):
    ERROR = "error"
    SESSION_CREATED = "session.created"
    SESSION_UPDATED = "session.updated"
    TRANSCRIPTION_SESSION_UPDATED = "transcription_session.updated"  # beta's name for it
    SESSION_CLOSED = "session.closed"
    SESSION_EXPIRED = "session.expired"
    SESSION_RESUMED = "session.resumed"
    SESSION_REPLACED = "session.replaced"
    SESSION_RESYNC_REQUIRED = "session.resync_required"
    HEARTBEAT_ACK = "session.heartbeat_ack"
    SPEECH_STARTED = "input_audio_buffer.speech_started"
    SPEECH_STOPPED = "input_audio_buffer.speech_stopped"
    INPUT_COMMITTED = "input_audio_buffer.committed"
    INPUT_CLEARED = "input_audio_buffer.cleared"
    INPUT_TIMEOUT = "input_audio_buffer.timeout_triggered"
    DTMF_RECEIVED = "input_audio_buffer.dtmf_event_received"
    ITEM_ADDED = "conversation.item.added"
    ITEM_DONE = "conversation.item.done"
    ITEM_RETRIEVED = "conversation.item.retrieved"
    ITEM_DELETED = "conversation.item.deleted"
    ITEM_TRUNCATED = "conversation.item.truncated"
    TRANSCRIPTION_DELTA = "conversation.item.input_audio_transcription.delta"
    TRANSCRIPTION_COMPLETED = "conversation.item.input_audio_transcription.completed"
    RESPONSE_CREATED = "response.created"
    OUTPUT_ITEM_ADDED = "response.output_item.added"
    OUTPUT_ITEM_DONE = "response.output_item.done"
    CONTENT_PART_ADDED = "response.content_part.added"
    CONTENT_PART_DONE = "response.content_part.done"
    AUDIO_DELTA = "response.output_audio.delta"
    AUDIO_DONE = "response.output_audio.done"
    AUDIO_TRANSCRIPT_DELTA = "response.output_audio_transcript.delta"
    AUDIO_TRANSCRIPT_DONE = "response.output_audio_transcript.done"
    TEXT_DELTA = "response.output_text.delta"
    TEXT_DONE = "response.output_text.done"
    CALL_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
    CALL_ARGUMENTS_DONE = "response.function_call_arguments.done"
    RESPONSE_DONE = "response.done"
    RATE_LIMITS_UPDATED = "rate_limits.updated"
    OUTPUT_AUDIO_CLEARED = "output_audio_buffer.cleared"
    PLAYBACK_ACKNOWLEDGED = "playback.acknowledged"


E = ServerEvent

_BETA_NAMES: Mapping[str, str] = {
    E.AUDIO_DELTA: "response.audio.delta",
    E.AUDIO_DONE: "response.audio.done",
    E.AUDIO_TRANSCRIPT_DELTA: "response.audio_transcript.delta",
    E.AUDIO_TRANSCRIPT_DONE: "response.audio_transcript.done",
    E.TEXT_DELTA: "response.text.delta",
    E.TEXT_DONE: "response.text.done",
    E.ITEM_ADDED: "conversation.item.created",
}

_BETA_CONTENT: Mapping[str, str] = {"output_audio": "audio", "output_text": "text"}


def event(kind: ServerEvent, **fields: Any) -> Event:
    return {"type": kind.value, **fields}


def _beta_item(item: Any) -> Any:
    if not isinstance(item, dict) or "content" not in item:
        return item
    content = [
        {**part, "type": _BETA_CONTENT.get(part.get("type", ""), part.get("type"))}
        for part in item["content"]
    ]
    return {**item, "content": content}


def to_beta(ev: Event) -> Event | None:
    """The beta-dialect form of a GA event; ``None`` for events beta lacks."""
    if ev["type"] == E.ITEM_DONE:
        return None
    out = {**ev, "type": _BETA_NAMES.get(ev["type"], ev["type"])}
    if "item" in out:
        out["item"] = _beta_item(out["item"])
    response = out.get("response")
    if isinstance(response, dict) and response.get("output"):
        out["response"] = {**response,
                           "output": [_beta_item(item) for item in response["output"]]}
    return out


def user_audio_item(item_id: str, transcript: str | None) -> Event:
    return {
        "id": item_id, "object": "realtime.item", "type": "message", "status": "completed",
        "role": "user", "content": [{"type": "input_audio", "transcript": transcript}],
    }


def assistant_item(item_id: str, status: str, transcript: str, *, audio: bool) -> Event:
    part: Event = (
        {"type": "output_audio", "transcript": transcript} if audio
        else {"type": "output_text", "text": transcript}
    )
    return {
        "id": item_id, "object": "realtime.item", "type": "message", "status": status,
        "role": "assistant", "content": [part] if transcript or audio else [],
    }


def function_call_item(item_id: str, status: str, *, call_id: str, name: str,
                       arguments: str) -> Event:
    return {"id": item_id, "object": "realtime.item", "type": "function_call",
            "status": status, "name": name, "call_id": call_id, "arguments": arguments}


def item_text(item: Mapping[str, Any]) -> str:
    """The words of an item: a message's, whatever its content parts are; a
    function call's name and arguments; a function call output's output."""
    words: list[str] = [item[key] for key in ("name", "arguments", "output")
                        if isinstance(item.get(key), str)]
    for part in item.get("content") or []:
        if isinstance(part, Mapping):
            text = part.get("text") or part.get("transcript")
            if isinstance(text, str):
                words.append(text)
    return " ".join(w for w in words if w)


def response_object(
    response_id: str, status: str, *, modalities: tuple[str, ...],
    output: list[Event], reason: str | None = None, metadata: Any = None,
    conversation_id: str | None = None,
) -> Event:
    details: Event | None = None
    if status == "cancelled":
        details = {"type": "cancelled", "reason": reason}
    elif status in ("failed", "incomplete"):
        details = {"type": status, "reason": reason, "error": None}
    return {
        "id": response_id, "object": "realtime.response", "status": status,
        "status_details": details, "output": output,
        "conversation_id": conversation_id, "output_modalities": list(modalities),
        "usage": None, "metadata": metadata,
    }
