"""Twilio Media Streams (bidirectional ``<Connect><Stream>``) as a codec, no I/O.

In: ``connected``, then ``start`` (the call, the media format, our webhook's
parameters), then ``media`` (inbound μ-law 8 kHz, base64) as ``AppendAudio``,
``dtmf`` as a keypress, ``mark`` echoes as playback acknowledgements, ``stop`` as
the hang-up. Anything malformed is ignored with a reason (the transport logs it,
rate-limited): nothing Twilio sends ends the call but ``stop``.

Out: each ``response.output_audio.delta`` (already ``audio/pcmu``) becomes a
``media`` message and a ``mark`` named ``<response id>:<cumulative ms>``; a
barge-in (``input_audio_buffer.speech_started``) while the caller still has our
audio buffered becomes a ``clear``, answered to the session with the truncate to
what the marks say was heard (``telephony.playback``). The messages are built
from templates, byte for byte what ``json.dumps`` of the message would give: the
audio is base64 (checked), and the stream sid is JSON-encoded once, at ``start``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from duplex import commands as c
from gateway.telephony.carrier_json import (
    base64_len,
    body_of,
    inbound_payload,
    keypress_digit,
    played,
    read_event,
)
from gateway.telephony.playback import Playback
from gateway.telephony.server_events import CarrierRender
from gateway.transports.codec import (
    NOTHING,
    QUIET,
    Frame,
    Hangup,
    Hello,
    Ignore,
    Inbound,
    Keypress,
    Refuse,
    Rendered,
    StreamStart,
)

MULAW_BYTES_PER_MS = 8  # 8 kHz, one byte a sample
AUDIO_FORMAT = "audio/pcmu"
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")  # needs no JSON escaping


class TwilioCodec(CarrierRender):
    answers_late = False  # Twilio sends no commands that a refusal would answer

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_sid: str | None = None  # once started
        self.call_sid = "(before start)"
        self.playback = Playback(MULAW_BYTES_PER_MS)
        self._sid_tail = ""  # '"}, "streamSid": "MZ…"}': what ends a media message
        self._mark_head = ""  # '{"event": "mark", "mark": {"name": "resp_…' of the reply
        self._mark_reply: str | None = None  # whose mark head that is

    # -- in --------------------------------------------------------------------------

    def parse(self, frame: Frame) -> Inbound:
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.stream_sid is None:
            return self._before_start(event, msg)
        if event == "stop":  # whichever stream it names: the call is over
            return Hangup("twilio_stop")
        return self._started(event, msg)

    def _before_start(self, event: str, msg: dict[str, Any]) -> Inbound:
        if event == "connected":
            return Hello()
        if event != "start":
            return QUIET  # nothing is ours before the start
        return self._start(msg)

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = msg.get("start")
        if not isinstance(body, dict):
            return Refuse("start without a start object")
        stream_sid = msg.get("streamSid") or body.get("streamSid")
        call_sid = body.get("callSid")
        if not isinstance(stream_sid, str) or not isinstance(call_sid, str) or not call_sid:
            return Refuse("start without streamSid/callSid")
        fmt = body.get("mediaFormat") or {}
        if (not isinstance(fmt, dict) or fmt.get("encoding") != "audio/x-mulaw"
                or str(fmt.get("sampleRate")) != "8000"):
            return Refuse(f"unsupported media format {fmt!r:.80}")
        params = body.get("customParameters") or {}
        self.stream_sid, self.call_sid = stream_sid, call_sid
        self._sid_tail = '"}, "streamSid": ' + json.dumps(stream_sid) + "}"
        return StreamStart(stream_sid, call_sid, params if isinstance(params, dict) else {},
                           AUDIO_FORMAT)

    def _started(self, event: str, msg: dict[str, Any]) -> Inbound:
        if msg.get("streamSid") != self.stream_sid:
            return Ignore("stream_sid", f"{event[:40]!r} for another stream")
        if event in ("connected", "start"):
            return QUIET  # said again: nothing new
        body = body_of(event, msg)
        if isinstance(body, Ignore):
            return body
        match event:
            case "media":
                audio = inbound_payload(body)
                return audio if isinstance(audio, Ignore) else c.AppendAudio(None, audio)
            case "mark":
                return played("mark", body.get("name"), self.playback)
            case "dtmf":
                digit = keypress_digit(body)
                return digit if isinstance(digit, Ignore) else Keypress(digit)
            case other:
                return Ignore("unknown_event", f"unknown event {other[:40]!r}")

    # -- out -------------------------------------------------------------------------

    def _streaming(self) -> bool:
        return self.stream_sid is not None

    def _call(self) -> str:
        return self.call_sid

    def _audio(self, ev: dict[str, Any]) -> Rendered:
        payload = ev.get("delta") or ""
        if not isinstance(payload, str):
            return NOTHING
        rid, item_id = str(ev.get("response_id")), str(ev.get("item_id"))
        name = self.playback.sent(rid, item_id, base64_len(payload))
        return Rendered((self._media_out(payload), self._mark(rid, name)))

    def _media_out(self, payload: str) -> str:
        if _BASE64.fullmatch(payload) is None:
            return self._message({"event": "media", "media": {"payload": payload}})
        return '{"event": "media", "media": {"payload": "' + payload + self._sid_tail

    def _mark(self, rid: str, name: str) -> str:
        if rid != self._mark_reply:  # the name's JSON, but for its ms and closing quote
            self._mark_reply = rid
            self._mark_head = '{"event": "mark", "mark": {"name": ' + json.dumps(rid)[:-1]
        return self._mark_head + name[len(rid):] + self._sid_tail

    def _barge_in(self) -> Rendered:
        return self._cleared(self.playback.barge_in(), self.playback.reply,
                             self._message({"event": "clear"}))

    def _message(self, message: dict[str, Any]) -> str:
        return json.dumps({**message, "streamSid": self.stream_sid})

    def ends_session(self, close_code: int) -> str | None:
        """A dropped media socket detaches the call's session, whatever its code:
        Twilio does not reconnect, but a second stream of the call may resume it;
        only ``stop`` ends the call."""
        return None
