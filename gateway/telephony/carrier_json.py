"""What the JSON carriers (Twilio, Exotel, Telnyx, Plivo; Vonage's text messages)
share in reading a message, with no I/O.

Their messages are JSON objects named by ``event``, and their audio is base64 in
``media.payload``; an echo of a point in our audio (a ``mark``, Plivo's
``checkpoint``) says the caller has heard up to it. Reading one is total:
whatever the frame holds, the answer is the message or an ``Ignore`` saying why
not (the transport logs it, rate-limited).
"""

from __future__ import annotations

from typing import Any

from duplex import commands as c
from duplex import wire
from duplex.errors import InvalidRequest
from gateway.telephony.playback import Playback
from gateway.transports.codec import QUIET, Frame, Ignore, Inbound, Keypress, Refuse


def read_event(frame: Frame, max_bytes: int) -> tuple[str, dict[str, Any]] | Ignore:
    """The event name and the message, or why the frame is not one."""
    if isinstance(frame, bytes):
        return Ignore("binary", "a binary frame")
    try:
        msg = wire.decode_json(frame, max_bytes=max_bytes)
    except InvalidRequest as exc:
        return Ignore(exc.code, f"a message that is not usable JSON ({exc.code})")
    if not isinstance(msg, dict) or not isinstance(msg.get("event"), str):
        return Ignore("no_event", "a message without an event name")
    return msg["event"], msg


def start_body(msg: dict[str, Any]) -> dict[str, Any] | Refuse:
    """A ``start`` message's ``start`` object (the call, the stream, the format)."""
    body = msg.get("start")
    if not isinstance(body, dict):
        return Refuse("start without a start object")
    return body


def stream_ids(stream_id: object, call_id: object, names: str) -> tuple[str, str] | Refuse:
    """A start's stream and call ids, or the refusal of a start that lacks them
    (``names``: the carrier's own for the two, as the refusal says them)."""
    if not isinstance(stream_id, str) or not isinstance(call_id, str) or not call_id:
        return Refuse(f"start without {names}")
    return stream_id, call_id


def custom_parameters(body: dict[str, Any], key: str) -> dict[str, Any]:
    """A start's parameters from our answer (the stream token, the instructions)
    under the carrier's ``key``; anything but an object counts as none."""
    params = body.get(key) or {}
    return params if isinstance(params, dict) else {}


def unsupported_format(media_format: object) -> Refuse:
    return Refuse(f"unsupported media format {media_format!r:.80}")


def unknown_event(event: str) -> Ignore:
    return Ignore("unknown_event", f"unknown event {event[:40]!r}")


def body_of(event: str, msg: dict[str, Any]) -> dict[str, Any] | Ignore:
    """The object named like the event (``media``, ``dtmf``, ``mark``)."""
    body = msg.get(event)
    if not isinstance(body, dict):
        return Ignore("no_body", f"{event[:40]!r} without its {event[:40]!r} object")
    return body


def inbound_payload(body: dict[str, Any]) -> bytes | Ignore:
    """The caller's audio of a ``media`` body, decoded; QUIET for another track."""
    track, payload = body.get("track", "inbound"), body.get("payload")
    if not isinstance(track, str) or not isinstance(payload, str):
        return Ignore("media_type", "media whose track/payload is not a string")
    if track not in ("inbound", "inbound_track"):
        return QUIET  # our own audio echoed back (both tracks streamed)
    return media_payload(body)


def media_payload(body: dict[str, Any]) -> bytes | Ignore:
    """A ``media`` body's audio, decoded, whatever its track."""
    payload = body.get("payload")
    if not isinstance(payload, str):
        return Ignore("media_type", "media whose payload is not a string")
    try:
        return c.decode_base64_audio(payload)
    except InvalidRequest:
        return Ignore("bad_base64", "media with bad base64")


def keypress(body: dict[str, Any]) -> Keypress | Ignore:
    """A ``dtmf`` body's key (Vonage: its ``websocket:dtmf`` message)."""
    digit = body.get("digit")
    if isinstance(digit, str) and digit:
        return Keypress(digit[:1])
    return Ignore("dtmf_type", "dtmf whose digit is not a string")


def played(kind: str, name: object, playback: Playback) -> Inbound:
    """An echoed ``kind`` (``mark``, ``checkpoint``) named ``name``: booked as heard
    when it is one of ours (what that tells the session: ``Playback.news``), else
    why not."""
    if not isinstance(name, str):
        return Ignore(f"{kind}_type", f"a {kind} whose name is not a string")
    if not playback.played(name):
        return Ignore(f"foreign_{kind}", f"{kind} {name[:80]!r}, not one of ours")
    return playback.news()


def audio_delta(ev: dict[str, Any]) -> tuple[str, str, str] | None:
    """A ``response.output_audio.delta``'s base64 audio, response id and item id."""
    payload = ev.get("delta") or ""
    if not isinstance(payload, str) or not payload:
        return None
    return payload, str(ev.get("response_id")), str(ev.get("item_id"))


def base64_len(payload: str) -> int:
    """Bytes a (well-formed) base64 string decodes to."""
    return len(payload) * 3 // 4 - payload[-2:].count("=")

