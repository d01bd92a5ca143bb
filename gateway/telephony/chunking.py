"""Reply audio cut to a carrier's sizes: whole frames, at least a minimum, padded at
the end. Pure; shared by the carriers that play raw PCM in fixed frames (Vonage:
640-byte 20 ms messages; Exotel: multiples of 320 bytes, at least 100 ms), with
the ``render`` they share (``ChunkedRender``)."""

from __future__ import annotations

import binascii
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from duplex import commands as c
from gateway.telephony.playback import Playback
from gateway.telephony.server_events import CarrierRender
from gateway.transports.codec import NOTHING, Rendered


class Chunker:
    """Bytes in, chunks out: each a whole number of ``frame`` bytes and at least
    ``least`` of them; what is short of that waits for more, or for ``flush``."""

    def __init__(self, frame: int, least: int, silence: bytes = b"\x00") -> None:
        self.frame = frame
        self.least = max(frame, least - least % frame)
        self.silence = silence
        self._pending = bytearray()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, data: bytes) -> bytes:
        """The chunk ``data`` completes, or b"" while there is not yet enough."""
        self._pending += data
        size = len(self._pending)
        if size < self.least:
            return b""
        size -= size % self.frame
        chunk = bytes(self._pending[:size])
        del self._pending[:size]
        return chunk

    def flush(self) -> bytes:
        """What is pending, padded with silence to a chunk (b"" when nothing is)."""
        if not self._pending:
            return b""
        short = max(self.least, -(-len(self._pending) // self.frame) * self.frame)
        chunk = bytes(self._pending) + self.silence * (short - len(self._pending))
        self._pending.clear()
        return chunk

    def drop(self) -> None:
        self._pending.clear()


@dataclass(frozen=True, slots=True)
class Chunk:
    audio: bytes
    point: str  # the playback point after it (``telephony.playback``): its ack's name


class Playout:
    """One stream's reply audio as a carrier's chunks, each followed by a named
    playback point the carrier acknowledges once it has played the chunk."""

    def __init__(self, chunker: Chunker, bytes_per_ms: float) -> None:
        self.chunker = chunker
        self.playback = Playback(bytes_per_ms)
        self._reply: tuple[str, str] = ("", "")  # (response id, item id) being chunked

    def delta(self, ev: dict[str, Any]) -> Chunk | None:
        """A ``response.output_audio.delta``: the chunk it completes, if any."""
        payload = ev.get("delta")
        if not isinstance(payload, str):
            return None
        reply = (str(ev.get("response_id")), str(ev.get("item_id")))
        if reply != self._reply:
            self.chunker.drop()  # an earlier reply's tail: its own ``done`` sent it
            self._reply = reply
        try:
            audio = binascii.a2b_base64(payload)
        except (binascii.Error, ValueError):  # not ours: the session's deltas are base64
            return None
        return self._chunk(self.chunker.add(audio))

    def done(self, ev: dict[str, Any]) -> Chunk | None:
        """A ``response.output_audio.done``: the reply's tail, padded."""
        if (str(ev.get("response_id")), str(ev.get("item_id"))) != self._reply:
            return None
        return self._chunk(self.chunker.flush())

    def barge_in(self) -> c.TruncateItem | None:
        """The caller spoke: nothing more of this reply goes out; the truncate to
        what was heard while some is still buffered at the carrier (None if not)."""
        self.chunker.drop()
        return self.playback.barge_in()

    def _chunk(self, audio: bytes) -> Chunk | None:
        if not audio:
            return None
        rid, item_id = self._reply
        return Chunk(audio, self.playback.sent(rid, item_id, len(audio)))


class ChunkedRender(CarrierRender):
    """The ``render`` of a carrier that plays our audio in chunks (``Playout``):
    each delta's chunk and the reply's padded tail go out as the carrier puts
    them (``_chunk_out``); a barge-in drops what is held and clears the carrier."""

    playout: Playout | None  # once the start says the format

    def _streaming(self) -> bool:
        return self.playout is not None

    def _audio(self, ev: dict[str, Any]) -> Rendered:
        assert self.playout is not None  # streaming
        chunk = self.playout.delta(ev)
        return NOTHING if chunk is None else self._chunk_out(chunk)

    def _audio_done(self, ev: dict[str, Any]) -> Rendered:
        assert self.playout is not None  # streaming
        chunk = self.playout.done(ev)
        return NOTHING if chunk is None else self._chunk_out(chunk)

    def _barge_in(self) -> Rendered:
        playout = self.playout
        assert playout is not None  # streaming
        return self._cleared(playout.barge_in(), playout.playback.reply, self._clear())

    @abstractmethod
    def _chunk_out(self, chunk: Chunk) -> Rendered:
        """A chunk and its playback point, as the carrier takes them."""

    @abstractmethod
    def _clear(self) -> str:
        """The message that drops what the carrier still buffers."""
