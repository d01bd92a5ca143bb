"""Telnyx media streaming (bidirectional, ``bidirectionalMode="rtp"``) as a codec, no I/O.

In (Telnyx's AsyncAPI "Stream call media over WebSocket"): ``connected``, then
``start`` (``stream_id``, the call, ``media_format``, our TeXML's
``custom_parameters``), then ``media`` (base64 RTP payloads, no headers) as
``AppendAudio``, ``dtmf`` as a keypress, ``mark`` echoes as playback
acknowledgements, ``error`` logged, ``stop`` as the hang-up. Anything malformed
is ignored with a reason: nothing Telnyx sends ends the call but ``stop``.

Out: each ``response.output_audio.delta`` becomes a ``media`` message and a
``mark`` named ``<response id>:<cumulative ms>``; a barge-in while the caller
still has our audio buffered becomes a ``clear``, answered to the session with
the truncate to what the marks say was heard (``telephony.playback``).

Formats: PCMU and PCMA at 8 kHz are the session's own (``audio/pcmu``,
``audio/pcma``). L16 (16-bit linear PCM in network byte order, RFC 3551) at 8 or
16 kHz is converted here to and from the session's ``audio/pcm`` (24 kHz
little-endian), with streaming resamplers, so the session never sees a rate
of its own for it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from gateway.audio import StreamResampler
from gateway.telephony.carrier_json import (
    audio_delta,
    base64_len,
    custom_parameters,
    inbound_payload,
    start_body,
    stream_ids,
    unsupported_format,
)
from gateway.telephony.media_stream import MediaStreamParse
from gateway.telephony.playback import Playback
from gateway.telephony.server_events import CarrierRender
from gateway.transports.codec import NOTHING, Ignore, Inbound, Refuse, Rendered, StreamStart

SESSION_PCM_RATE = 24000  # the session's audio/pcm
# Telnyx's encoding names → the session's format, where the session speaks it as is
G711 = {"PCMU": "audio/pcmu", "PCMA": "audio/pcma"}
L16_RATES = (8000, 16000)


class Linear16:
    """L16 (big-endian) at ``rate`` ↔ the session's 24 kHz little-endian PCM."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._in = StreamResampler(rate, SESSION_PCM_RATE, "QQ")  # "QQ": no block latency
        self._out = StreamResampler(SESSION_PCM_RATE, rate, "QQ")

    def to_session(self, data: bytes) -> bytes:
        pcm = np.frombuffer(data[:len(data) // 2 * 2], dtype=">i2").astype(np.int16)
        return self._in.process(pcm).astype("<i2").tobytes()

    def to_carrier(self, data: bytes) -> bytes:
        pcm = np.frombuffer(data[:len(data) // 2 * 2], dtype="<i2").astype(np.int16)
        return self._out.process(pcm).astype(">i2").tobytes()


class TelnyxCodec(MediaStreamParse, CarrierRender):
    answers_late = False  # Telnyx sends no commands that a refusal would answer
    stream_field, other_stream, stop_reason = "stream_id", "stream_id", "telnyx_stop"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_id: str | None = None  # once started
        self.call_id = "(before start)"
        self.playback = Playback(8)  # replaced at the start, by the format's rate
        self.linear: Linear16 | None = None  # L16: converted here

    # -- in --------------------------------------------------------------------------

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = start_body(msg)
        if isinstance(body, Refuse):
            return body
        params = custom_parameters(body, "custom_parameters")
        # our TeXML names the call it answered: TeXML's CallSid is not documented
        # as the same string as the stream's call_control_id
        ids = stream_ids(msg.get("stream_id"), params.get("call") or body.get("call_control_id"),
                         "stream_id/call_control_id")
        if isinstance(ids, Refuse):
            return ids
        audio_format = self._format(body.get("media_format"))
        if audio_format is None:
            return unsupported_format(body.get("media_format"))
        stream_id, call_id = self.stream_id, self.call_id = ids
        return StreamStart(stream_id, call_id, params, audio_format)

    def _format(self, fmt: object) -> str | None:
        """The session's audio format for Telnyx's ``media_format``; None: unsupported."""
        if not isinstance(fmt, dict):
            return None
        encoding, rate = fmt.get("encoding"), str(fmt.get("sample_rate"))
        if isinstance(encoding, str) and encoding.upper() in G711 and rate == "8000":
            self.playback = Playback(8)
            return G711[encoding.upper()]
        if encoding == "L16" and rate in {str(r) for r in L16_RATES}:
            self.linear = Linear16(int(rate))
            self.playback = Playback(2 * int(rate) / 1000)
            return "audio/pcm"
        return None

    def _started(self, event: str, msg: dict[str, Any]) -> Inbound:
        if event == "error":
            return Ignore("telnyx_error", f"Telnyx error {str(msg.get('payload'))[:200]}")
        return super()._started(event, msg)

    def _playback(self) -> Playback:
        return self.playback

    def _audio_in(self, body: dict[str, Any]) -> bytes | Ignore:
        audio = inbound_payload(body)
        if isinstance(audio, Ignore) or self.linear is None:
            return audio
        return self.linear.to_session(audio)

    # -- out -------------------------------------------------------------------------

    def _streaming(self) -> bool:
        return self.stream_id is not None

    def _audio(self, ev: dict[str, Any]) -> Rendered:
        delta = audio_delta(ev)
        if delta is None:
            return NOTHING
        payload, rid, item_id = delta
        nbytes = base64_len(payload)
        if self.linear is not None:
            try:
                pcm = self.linear.to_carrier(base64.b64decode(payload, validate=True))
            except ValueError:
                return NOTHING
            if not pcm:
                return NOTHING  # the resampler holds it until the next delta
            payload, nbytes = base64.b64encode(pcm).decode(), len(pcm)
        name = self.playback.sent(rid, item_id, nbytes)
        return Rendered((json.dumps({"event": "media", "media": {"payload": payload}}),
                         json.dumps({"event": "mark", "mark": {"name": name}})))

    def _barge_in(self) -> Rendered:
        return self._cleared(self.playback.barge_in(), self.playback.reply,
                             json.dumps({"event": "clear"}))

    def ends_session(self, close_code: int) -> str | None:
        """A dropped media socket detaches the call's session, whatever its code: a
        second stream of the call may resume it; only ``stop`` ends the call."""
        return None
