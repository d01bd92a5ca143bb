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

from duplex import commands as c
from gateway.audio import StreamResampler
from gateway.telephony.carrier_json import (
    audio_delta,
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


class TelnyxCodec(CarrierRender):
    answers_late = False  # Telnyx sends no commands that a refusal would answer

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_id: str | None = None  # once started
        self.call_id = "(before start)"
        self.playback = Playback(8)  # replaced at the start, by the format's rate
        self.linear: Linear16 | None = None  # L16: converted here

    # -- in --------------------------------------------------------------------------

    def parse(self, frame: Frame) -> Inbound:
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.stream_id is None:
            if event == "connected":
                return Hello()
            return self._start(msg) if event == "start" else QUIET
        if event == "stop":  # whichever stream it names: the call is over
            return Hangup("telnyx_stop")
        if msg.get("stream_id") != self.stream_id:
            return Ignore("stream_id", f"{event[:40]!r} for another stream")
        return self._started(event, msg)

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = msg.get("start")
        if not isinstance(body, dict):
            return Refuse("start without a start object")
        stream_id = msg.get("stream_id")
        params = body.get("custom_parameters") or {}
        params = params if isinstance(params, dict) else {}
        # our TeXML names the call it answered: TeXML's CallSid is not documented
        # as the same string as the stream's call_control_id
        call_id = params.get("call") or body.get("call_control_id")
        if not isinstance(stream_id, str) or not isinstance(call_id, str) or not call_id:
            return Refuse("start without stream_id/call_control_id")
        audio_format = self._format(body.get("media_format"))
        if audio_format is None:
            return Refuse(f"unsupported media format {body.get('media_format')!r:.80}")
        self.stream_id, self.call_id = stream_id, call_id
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
        if event in ("connected", "start"):
            return QUIET
        if event == "error":
            return Ignore("telnyx_error", f"Telnyx error {str(msg.get('payload'))[:200]}")
        body = body_of(event, msg)
        if isinstance(body, Ignore):
            return body
        match event:
            case "media":
                audio = inbound_payload(body)
                if isinstance(audio, Ignore):
                    return audio
                if self.linear is not None:
                    audio = self.linear.to_session(audio)
                return c.AppendAudio(None, audio)
            case "mark":
                return played("mark", body.get("name"), self.playback)
            case "dtmf":
                digit = keypress_digit(body)
                return digit if isinstance(digit, Ignore) else Keypress(digit)
            case other:
                return Ignore("unknown_event", f"unknown event {other[:40]!r}")

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
