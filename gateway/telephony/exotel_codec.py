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
from typing import Any

from duplex.config import AudioFormat
from gateway.telephony.carrier_json import (
    custom_parameters,
    media_payload,
    start_body,
    stream_ids,
    unsupported_format,
)
from gateway.telephony.chunking import Chunk, ChunkedRender, Chunker, Playout
from gateway.telephony.media_stream import MediaStreamParse
from gateway.telephony.playback import Playback
from gateway.transports.codec import Ignore, Refuse, Rendered, StreamStart

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


class ExotelCodec(MediaStreamParse, ChunkedRender):
    answers_late = False  # Exotel sends no commands that a refusal would answer
    stream_field, other_stream, stop_reason = "stream_sid", "stream_sid", "exotel_stop"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.stream_id: str | None = None  # the stream sid, once started
        self.call_id = "(before start)"  # the call sid
        self.playout: Playout | None = None  # once the start says the format

    # -- in --------------------------------------------------------------------------

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        body = start_body(msg)
        if isinstance(body, Refuse):
            return body
        ids = stream_ids(msg.get("stream_sid") or body.get("stream_sid"), body.get("call_sid"),
                         "stream_sid/call_sid")
        if isinstance(ids, Refuse):
            return ids
        fmt = stream_format(body.get("media_format"))
        if fmt is None:
            return unsupported_format(body.get("media_format"))
        stream_id, call_id = self.stream_id, self.call_id = ids
        per_ms = fmt.rate * fmt.bytes_per_sample / 1000
        silence = b"\xff" if fmt is AudioFormat.PCMU else b"\x00"
        self.playout = Playout(Chunker(CHUNK_STEP, LEAST_CHUNK, silence), per_ms)
        return StreamStart(stream_id, call_id, custom_parameters(body, "custom_parameters"),
                           fmt.value)

    def _playback(self) -> Playback:
        assert self.playout is not None  # started
        return self.playout.playback

    def _audio_in(self, body: dict[str, Any]) -> bytes | Ignore:
        return media_payload(body)  # Exotel's media is the caller's: it names no track

    # -- out -------------------------------------------------------------------------

    def _chunk_out(self, chunk: Chunk) -> Rendered:
        payload = base64.b64encode(chunk.audio).decode()
        return Rendered((
            self._stream_message({"event": "media", "media": {"payload": payload}}),
            self._stream_message({"event": "mark", "mark": {"name": chunk.point}})))

    def _clear(self) -> str:
        return self._stream_message({"event": "clear"})

    def ends_session(self, close_code: int) -> str | None:
        """A dropped media socket detaches the call's session: a second stream of
        the call may resume it; only ``stop`` ends the call."""
        return None
