"""The Vonage Voice API WebSocket as a codec, no I/O.

In: the first text message, ``websocket:connected``, carries the ``content-type``
(``audio/l16;rate=16000`` or ``;rate=8000``) and, at its top level, the headers
our answer's NCCO set (the call's uuid, the stream token, the instructions): it is
the stream's start. Then binary messages are the caller's audio (16-bit
little-endian linear PCM, 20 ms each) as ``AppendAudio``; ``websocket:dtmf`` is a
keypress; ``websocket:notify`` echoes our playback points; ``websocket:cleared``
acknowledges a clear. Anything else is ignored with a reason. Vonage ends the call
by closing the socket normally (1000); any other close is a drop, resumable.

Out: reply audio (already in the stream's format) as binary messages of exactly
one 20 ms frame each (640 bytes at 16 kHz), as Vonage requires, the rest held for
the next delta and the reply's tail padded with silence (``telephony.chunking``);
after each delta's frames a ``{"action": "notify", "payload": …}``, which Vonage
echoes as ``websocket:notify`` once the audio before it has played (its playback
acknowledgement); a barge-in while our audio is still buffered (Vonage buffers
what is sent ahead of real time) becomes ``{"action": "clear"}``, which drops
Vonage's buffer, answered to the session with the truncate to what the notify
echoes say was heard (``telephony.playback``).
"""

from __future__ import annotations

import json
from typing import Any

from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.config import AudioFormat
from gateway.telephony.carrier_json import keypress, read_event, unknown_event
from gateway.telephony.chunking import Chunk, ChunkedRender, Chunker, Playout
from gateway.transports.codec import (
    QUIET,
    Frame,
    Ignore,
    Inbound,
    Refuse,
    Rendered,
    StreamStart,
)

CONTENT_TYPE = "audio/l16;rate=16000"  # what our NCCO asks for
FORMATS = {"audio/l16;rate=16000": AudioFormat.L16_16K, "audio/l16;rate=8000": AudioFormat.L16_8K}
FRAME_MS = 20  # each binary message: one 20 ms frame, 640 bytes at 16 kHz
CALL_HEADER = "call"  # the NCCO header that names the call (its uuid)
CLEAR = json.dumps({"action": "clear"})


class VonageCodec(ChunkedRender):
    answers_late = False  # Vonage sends no commands that a refusal would answer

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.call_id: str | None = None  # once started
        self.playout: Playout | None = None

    # -- in --------------------------------------------------------------------------

    def parse(self, frame: Frame) -> Inbound:
        if isinstance(frame, bytes):
            if self.call_id is None:
                return QUIET  # nothing is ours before the start
            if len(frame) % 2:
                return Ignore("odd_audio", f"audio of {len(frame)} bytes, an odd count")
            return c.AppendAudio(None, frame)
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.call_id is None:
            return self._start(msg) if event == "websocket:connected" else QUIET
        match event:
            case "websocket:dtmf":
                return keypress(msg)
            case "websocket:notify":
                return self._notify(msg.get("payload"))
            case "websocket:cleared" | "websocket:connected":
                return QUIET
            case other:
                return unknown_event(other)

    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        call_id = msg.get(CALL_HEADER)
        if not isinstance(call_id, str) or not call_id:
            return Refuse(f"websocket:connected without the {CALL_HEADER!r} header")
        fmt = FORMATS.get(str(msg.get("content-type")).replace(" ", "").lower())
        if fmt is None:
            return Refuse(f"unsupported content-type {msg.get('content-type')!r:.80}")
        self.call_id = call_id
        per_ms = fmt.rate * fmt.bytes_per_sample / 1000
        frame = int(FRAME_MS * per_ms)
        self.playout = Playout(Chunker(frame, frame), per_ms)
        params = {k: v for k, v in msg.items() if k in ("token", "instructions")}
        return StreamStart(call_id, call_id, params, fmt.value)

    def _notify(self, payload: object) -> Inbound:
        assert self.playout is not None  # started
        name = payload.get("name") if isinstance(payload, dict) else None
        if not isinstance(name, str):
            return Ignore("notify_type", "a notify whose payload has no string name")
        if not self.playout.playback.played(name):
            return Ignore("foreign_notify", f"notify {name[:80]!r}, not one of ours")
        return self.playout.playback.news()

    # -- out -------------------------------------------------------------------------

    def _call(self) -> str:
        assert self.call_id is not None  # streaming
        return self.call_id

    def _chunk_out(self, chunk: Chunk) -> Rendered:
        """A chunk as Vonage takes it: one binary message a frame, then its notify."""
        assert self.playout is not None  # streaming
        step = self.playout.chunker.frame
        frames: list[Frame] = [chunk.audio[i:i + step] for i in range(0, len(chunk.audio), step)]
        frames.append(json.dumps({"action": "notify", "payload": {"name": chunk.point}}))
        return Rendered(tuple(frames))

    def _clear(self) -> str:
        return CLEAR

    def ends_session(self, close_code: int) -> str | None:
        """Vonage hangs up by closing the socket normally; any other close is a
        dropped socket, whose session waits to be resumed."""
        return "vonage_hangup" if close_code == CloseCode.NORMAL else None
