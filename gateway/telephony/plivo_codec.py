"""Plivo audio streams (``<Stream bidirectional="true">``) as a codec, no I/O.

In (Plivo's "Stream Event Protocol"): ``start`` (the call, the stream, the media
format, and our answer's ``extraHeaders`` as ``extra_headers``), then ``media``
(μ-law 8 kHz, base64) as ``AppendAudio``, ``dtmf`` as a keypress,
``playedStream`` as the acknowledgement of a checkpoint, ``clearedAudio`` as
that of a clear. Anything malformed is ignored with a reason. Plivo sends no
``stop``: the call's end closes the socket, so a normal close (1000) ends the
session, any other detaches it, resumable.

Out: each ``response.output_audio.delta`` becomes a ``playAudio`` and a
``checkpoint`` named ``<response id>:<cumulative ms>``; a barge-in while the
caller still has our audio buffered becomes a ``clearAudio``, answered to the
session with the truncate to the last checkpoint Plivo played
(``telephony.playback``). Plivo acknowledges a checkpoint only once what was
queued before it has been played: after a clear it never does, and the
truncate already stands.

``extraHeaders`` allows only ``[A-Za-z0-9]`` in its keys and values, so our
stream token travels as two of them (``tokenexpires``, ``tokenmac``) and a
per-call instruction override as hex (``instructionshex``).
"""

from __future__ import annotations

import json
from typing import Any

from duplex import commands as c
from duplex.close_codes import CloseCode
from gateway.telephony.carrier_json import (
    audio_delta,
    base64_len,
    body_of,
    inbound_payload,
    keypress,
    played,
    read_event,
    start_body,
    stream_ids,
    unknown_event,
    unsupported_format,
)
from gateway.telephony.playback import Playback
from gateway.telephony.server_events import CarrierRender
from gateway.transports.codec import (
    NOTHING,
    QUIET,
    Frame,
    Ignore,
    Inbound,
    Refuse,
    Rendered,
    StreamStart,
)

MULAW_BYTES_PER_MS = 8
CONTENT_TYPE = "audio/x-mulaw"
SAMPLE_RATE = 8000


def extra_headers(token: str, instructions: str | None) -> str:
    """Our ``extraHeaders``: the stream token, and the instructions when they are
    a per-call override (else the stream takes ``--plivo-instructions``)."""
    expires, _, mac = token.partition(".")
    pairs = [f"tokenexpires={expires}", f"tokenmac={mac}"]
    if instructions is not None:
        pairs.append(f"instructionshex={instructions.encode().hex()}")
    return ",".join(pairs)


def stream_parameters(raw: object, default_instructions: str) -> dict[str, str]:
    """The stream token and instructions from a start's ``extra_headers``
    (``k=v`` pairs; Plivo's example separates them with ``;``, its XML with ``,``)."""
    pairs: dict[str, str] = {}
    if isinstance(raw, dict):
        pairs = {str(k): str(v) for k, v in raw.items()}
    elif isinstance(raw, str):
        for part in raw.replace(";", ",").split(","):
            key, sep, value = part.partition("=")
            if sep:
                pairs[key.strip()] = value.strip()
    params = {"token": f"{pairs.get('tokenexpires', '')}.{pairs.get('tokenmac', '')}",
              "instructions": default_instructions}
    if "instructionshex" in pairs:
        try:
            params["instructions"] = bytes.fromhex(pairs["instructionshex"]).decode()
        except ValueError:
            params["instructions"] = "\0"  # not what any token was minted for
    return params


class PlivoCodec(CarrierRender):
    answers_late = False  # Plivo sends no commands that a refusal would answer

    def __init__(self, max_bytes: int, instructions: str = "") -> None:
        self.max_bytes = max_bytes
        self.instructions = instructions  # --plivo-instructions
        self.stream_id: str | None = None  # once started
        self.call_id = "(before start)"
        self.playback = Playback(MULAW_BYTES_PER_MS)

    # -- in --------------------------------------------------------------------------

    def parse(self, frame: Frame) -> Inbound:
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.stream_id is None:
            return self._start(msg) if event == "start" else QUIET
        stream_id = msg.get("streamId")
        if stream_id is not None and stream_id != self.stream_id:
            return Ignore("stream_id", f"{event[:40]!r} for another stream")
        return self._started(event, msg)

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = start_body(msg)
        if isinstance(body, Refuse):
            return body
        ids = stream_ids(body.get("streamId"), body.get("callId"), "streamId/callId")
        if isinstance(ids, Refuse):
            return ids
        fmt = body.get("mediaFormat") or {}
        if (not isinstance(fmt, dict) or fmt.get("encoding") != CONTENT_TYPE
                or str(fmt.get("sampleRate")) != str(SAMPLE_RATE)):
            return unsupported_format(fmt)
        stream_id, call_id = self.stream_id, self.call_id = ids
        return StreamStart(stream_id, call_id,
                           stream_parameters(msg.get("extra_headers"), self.instructions),
                           "audio/pcmu")

    def _started(self, event: str, msg: dict[str, Any]) -> Inbound:
        match event:
            case "start" | "clearedAudio":
                return QUIET
            case "playedStream":
                return played("checkpoint", msg.get("name"), self.playback)
            case "media" | "dtmf":
                body = body_of(event, msg)
                if isinstance(body, Ignore):
                    return body
                if event == "dtmf":
                    return keypress(body)
                audio = inbound_payload(body)
                return audio if isinstance(audio, Ignore) else c.AppendAudio(None, audio)
            case other:
                return unknown_event(other)

    # -- out -------------------------------------------------------------------------

    def _streaming(self) -> bool:
        return self.stream_id is not None

    def _call(self) -> str:
        return self.call_id

    def _audio(self, ev: dict[str, Any]) -> Rendered:
        delta = audio_delta(ev)
        if delta is None:
            return NOTHING
        payload, rid, item_id = delta
        name = self.playback.sent(rid, item_id, base64_len(payload))
        play = {"event": "playAudio", "media": {"contentType": CONTENT_TYPE,
                                                "sampleRate": SAMPLE_RATE, "payload": payload}}
        checkpoint = {"event": "checkpoint", "streamId": self.stream_id, "name": name}
        return Rendered((json.dumps(play), json.dumps(checkpoint)))

    def _barge_in(self) -> Rendered:
        return self._cleared(self.playback.barge_in(), self.playback.reply,
                             json.dumps({"event": "clearAudio", "streamId": self.stream_id}))

    def ends_session(self, close_code: int) -> str | None:
        """Plivo ends a call by closing its stream: a normal close is the hang-up;
        any other is a dropped socket, and a second stream of the call may resume."""
        return "plivo_hangup" if close_code == CloseCode.NORMAL else None
