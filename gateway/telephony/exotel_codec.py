"""Exotel Voicebot (bidirectional AgentStream) as a codec, no I/O.

In: ``connected``, then ``start`` (the call, the media format, the custom
parameters of the stream URL), then ``media`` (the caller: 16-bit little-endian
PCM at the stream's rate, base64) as ``AppendAudio``, ``dtmf`` as a keypress,
``mark`` echoes as playback acknowledgements, ``stop`` as the hang-up. Anything
malformed is ignored with a reason: nothing Exotel sends ends the call but ``stop``.

Out: reply audio (already in the stream's format) as ``media`` chunks of the
sizes Exotel documents, in bytes whatever the rate: a multiple of 320 and at least
3.2 KB (smaller or ragged chunks play with gaps), the rest held for the next delta
and the reply's tail padded with silence (``telephony.chunking``), each followed by a
``mark``; a barge-in while our audio is still buffered becomes a ``clear`` (Exotel
echoes the pending marks), answered to the session with the truncate to what the
marks say was heard (``telephony.playback``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from duplex import commands as c
from duplex.config import AudioFormat
from duplex.errors import InvalidRequest
from gateway.telephony.carrier_json import body_of, keypress_digit, played, read_event
from gateway.telephony.chunking import Chunk, ChunkedRender, Chunker, Playout
from gateway.transports.codec import (
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

CHUNK_STEP = 320  # Exotel's chunk sizes, as it states them: a multiple of 320 bytes
LEAST_CHUNK = 3200  # and at least 3.2 KB (it calls that 100 ms; at 8 kHz it is 200)
# media_format.sample_rate → the session's format (raw/slin; 8 kHz is the default)
LINEAR = {"8000": AudioFormat.L16_8K, "16000": AudioFormat.L16_16K,
          "24000": AudioFormat.PCM16}


def stream_format(media_format: object) -> AudioFormat | None:
    """The session's audio format for Exotel's ``media_format``; None: not one we speak."""
    if media_format is None:
        return AudioFormat.L16_8K
    if not isinstance(media_format, dict):
        return None
    rate = str(media_format.get("sample_rate", "8000"))
    if "mulaw" in str(media_format.get("encoding", "")).lower():
        return AudioFormat.PCMU if rate == "8000" else None
    return LINEAR.get(rate)


class ExotelCodec(ChunkedRender):
    answers_late = False  # Exotel sends no commands that a refusal would answer

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_sid: str | None = None  # once started
        self.call_sid = "(before start)"
        self.playout: Playout | None = None  # once the start says the format

    # -- in --------------------------------------------------------------------------

    def parse(self, frame: Frame) -> Inbound:
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.stream_sid is None:
            if event == "connected":
                return Hello()
            return self._start(msg) if event == "start" else QUIET
        if event == "stop":  # whichever stream it names: the call is over
            return Hangup("exotel_stop")
        return self._started(event, msg)

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = msg.get("start")
        if not isinstance(body, dict):
            return Refuse("start without a start object")
        stream_sid = msg.get("stream_sid") or body.get("stream_sid")
        call_sid = body.get("call_sid")
        if not isinstance(stream_sid, str) or not isinstance(call_sid, str) or not call_sid:
            return Refuse("start without stream_sid/call_sid")
        fmt = stream_format(body.get("media_format"))
        if fmt is None:
            return Refuse(f"unsupported media format {body.get('media_format')!r:.80}")
        params = body.get("custom_parameters") or {}
        self.stream_sid, self.call_sid = stream_sid, call_sid
        per_ms = fmt.rate * fmt.bytes_per_sample / 1000
        silence = b"\xff" if fmt is AudioFormat.PCMU else b"\x00"
        self.playout = Playout(Chunker(CHUNK_STEP, LEAST_CHUNK, silence), per_ms)
        return StreamStart(stream_sid, call_sid, params if isinstance(params, dict) else {},
                           fmt.value)

    def _started(self, event: str, msg: dict[str, Any]) -> Inbound:
        if msg.get("stream_sid") != self.stream_sid:
            return Ignore("stream_sid", f"{event[:40]!r} for another stream")
        if event in ("connected", "start"):
            return QUIET  # said again: nothing new
        body = body_of(event, msg)
        if isinstance(body, Ignore):
            return body
        match event:
            case "media":
                payload = body.get("payload")
                if not isinstance(payload, str):
                    return Ignore("media_type", "media whose payload is not a string")
                try:
                    return c.AppendAudio(None, c.decode_base64_audio(payload))
                except InvalidRequest:
                    return Ignore("bad_base64", "media with bad base64")
            case "mark":
                assert self.playout is not None  # started
                return played("mark", body.get("name"), self.playout.playback)
            case "dtmf":
                digit = keypress_digit(body)
                return digit if isinstance(digit, Ignore) else Keypress(digit)
            case other:
                return Ignore("unknown_event", f"unknown event {other[:40]!r}")

    # -- out -------------------------------------------------------------------------

    def _call(self) -> str:
        return self.call_sid

    def _chunk_out(self, chunk: Chunk) -> Rendered:
        payload = base64.b64encode(chunk.audio).decode()
        return Rendered((self._message({"event": "media", "media": {"payload": payload}}),
                         self._message({"event": "mark", "mark": {"name": chunk.point}})))

    def _clear(self) -> str:
        return self._message({"event": "clear"})

    def _message(self, message: dict[str, Any]) -> str:
        return json.dumps({**message, "stream_sid": self.stream_sid})

    def ends_session(self, close_code: int) -> str | None:
        """A dropped media socket detaches the call's session: a second stream of
        the call may resume it; only ``stop`` ends the call."""
        return None
