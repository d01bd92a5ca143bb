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

from gateway.telephony.carrier_json import (
    base64_len,
    custom_parameters,
    start_body,
    stream_ids,
    unsupported_format,
)
from gateway.telephony.media_stream import MediaStreamParse
from gateway.telephony.playback import Playback
from gateway.telephony.server_events import CarrierRender
from gateway.transports.codec import NOTHING, Refuse, Rendered, StreamStart

MULAW_BYTES_PER_MS = 8  # 8 kHz, one byte a sample
AUDIO_FORMAT = "audio/pcmu"
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")  # needs no JSON escaping


class TwilioCodec(MediaStreamParse, CarrierRender):
    answers_late = False  # Twilio sends no commands that a refusal would answer
    stream_field, other_stream, stop_reason = "streamSid", "stream_sid", "twilio_stop"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_id: str | None = None  # the stream sid, once started
        self.call_id = "(before start)"  # the call sid
        self.playback = Playback(MULAW_BYTES_PER_MS)
        self._sid_tail = ""  # '"}, "streamSid": "MZ…"}': what ends a media message
        self._mark_head = ""  # '{"event": "mark", "mark": {"name": "resp_…' of the reply
        self._mark_reply: str | None = None  # whose mark head that is

    # -- in --------------------------------------------------------------------------

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = start_body(msg)
        if isinstance(body, Refuse):
            return body
        ids = stream_ids(msg.get("streamSid") or body.get("streamSid"), body.get("callSid"),
                         "streamSid/callSid")
        if isinstance(ids, Refuse):
            return ids
        fmt = body.get("mediaFormat") or {}
        if (not isinstance(fmt, dict) or fmt.get("encoding") != "audio/x-mulaw"
                or str(fmt.get("sampleRate")) != "8000"):
            return unsupported_format(fmt)
        stream_id, call_id = self.stream_id, self.call_id = ids
        self._sid_tail = '"}, "streamSid": ' + json.dumps(stream_id) + "}"
        return StreamStart(stream_id, call_id, custom_parameters(body, "customParameters"),
                           AUDIO_FORMAT)

    def _playback(self) -> Playback:
        return self.playback

    # -- out -------------------------------------------------------------------------

    def _streaming(self) -> bool:
        return self.stream_id is not None

    def _audio(self, ev: dict[str, Any]) -> Rendered:
        payload = ev.get("delta") or ""
        if not isinstance(payload, str):
            return NOTHING
        rid, item_id = str(ev.get("response_id")), str(ev.get("item_id"))
        name = self.playback.sent(rid, item_id, base64_len(payload))
        return Rendered((self._media_out(payload), self._mark(rid, name)))

    def _media_out(self, payload: str) -> str:
        if _BASE64.fullmatch(payload) is None:
            return self._stream_message({"event": "media", "media": {"payload": payload}})
        return '{"event": "media", "media": {"payload": "' + payload + self._sid_tail

    def _mark(self, rid: str, name: str) -> str:
        if rid != self._mark_reply:  # the name's JSON, but for its ms and closing quote
            self._mark_reply = rid
            self._mark_head = '{"event": "mark", "mark": {"name": ' + json.dumps(rid)[:-1]
        return self._mark_head + name[len(rid):] + self._sid_tail

    def _barge_in(self) -> Rendered:
        return self._cleared(self.playback.barge_in(), self.playback.reply,
                             self._stream_message({"event": "clear"}))

    def ends_session(self, close_code: int) -> str | None:
        """A dropped media socket detaches the call's session, whatever its code:
        Twilio does not reconnect, but a second stream of the call may resume it;
        only ``stop`` ends the call."""
        return None
