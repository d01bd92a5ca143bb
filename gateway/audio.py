"""Wire audio conversion: G.711 codecs, PCM16 framing and resampling.

Pure functions over numpy arrays, plus ``StreamResampler`` for the one place
where state must survive between chunks (a filter's history). Internally audio
is mono ``int16`` PCM at some rate; on the wire it is one of ``AudioFormat``:
24 kHz little-endian PCM16, the same at a carrier's 8 or 16 kHz (``audio/l16``),
or G.711 μ-law / A-law at 8 kHz.

The G.711 code follows ITU-T G.711 as its reference software (ITU-T G.191)
computes it: negative samples take their one's-complement magnitude, so every
16-bit input maps to the code G.191 gives, and decoding is exact by table.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import soxr  # type: ignore[import-untyped]  # ships a .pyi but no py.typed

from duplex.config import AudioFormat
from duplex.errors import InvalidRequest
from plugins.base import Pcm

__all__ = [
    "StreamResampler",
    "alaw_decode",
    "alaw_encode",
    "decode_input",
    "duration_ms",
    "encode_output",
    "from_wire",
    "resample",
    "to_wire",
    "ulaw_decode",
    "ulaw_encode",
]

_U8 = npt.NDArray[np.uint8]
_I32 = npt.NDArray[np.int32]

_ULAW_BIAS: Final = 33  # added to the 14-bit magnitude so segments start on powers of two
_ULAW_MAX: Final = 0x1FFF  # largest biased 14-bit magnitude
# Lowest biased magnitude of μ-law segments 1..7 (segment 0 is everything below 64).
_ULAW_SEGMENT_STARTS: Final = np.array([64, 128, 256, 512, 1024, 2048, 4096], dtype=np.int32)
# Lowest 12-bit magnitude of A-law segments 1..7 (segment 0 is linear below 16).
_ALAW_SEGMENT_STARTS: Final = np.array([16, 32, 64, 128, 256, 512, 1024], dtype=np.int32)
_ALAW_TOGGLE: Final = 0x55  # A-law inverts every even bit on the line


def _magnitude(pcm: Pcm, shift: int) -> _I32:
    """One's-complement magnitude of 16-bit samples, dropped to ``16 - shift`` bits.

    G.711 codes a sign bit and a magnitude; using ``~x`` for negatives (not
    ``-x``) keeps -32768 in range and matches the ITU reference coder.
    """
    x = pcm.astype(np.int32)
    return np.where(x < 0, ~x, x) >> shift


def _sign_bit(pcm: Pcm) -> _I32:
    """0x80 for non-negative samples: G.711 sets the sign bit for positive values."""
    return np.where(pcm >= 0, 0x80, 0).astype(np.int32)


def ulaw_encode(pcm: Pcm) -> _U8:
    """16-bit PCM → G.711 μ-law codes (vectorised)."""
    biased = np.minimum(_magnitude(pcm, 2) + _ULAW_BIAS, _ULAW_MAX)
    segment = np.searchsorted(_ULAW_SEGMENT_STARTS, biased, side="right").astype(np.int32)
    mantissa = (biased >> (segment + 1)) & 0x0F
    # μ-law transmits the complement of segment and mantissa.
    code = (0x7F ^ ((segment << 4) | mantissa)) | _sign_bit(pcm)
    return code.astype(np.uint8)


def alaw_encode(pcm: Pcm) -> _U8:
    """16-bit PCM → G.711 A-law codes (vectorised)."""
    magnitude = _magnitude(pcm, 4)  # 12 bits
    segment = np.searchsorted(_ALAW_SEGMENT_STARTS, magnitude, side="right").astype(np.int32)
    # Segments 0 and 1 share a step size; above that each segment halves resolution.
    shift: _I32 = np.maximum(segment - 1, 0)
    mantissa = (magnitude >> shift) & 0x0F
    code = ((segment << 4) | mantissa | _sign_bit(pcm)) ^ _ALAW_TOGGLE
    return code.astype(np.uint8)


def _ulaw_table() -> Pcm:
    """Linear value of each of the 256 μ-law codes (midpoint of its interval)."""
    codes = np.arange(256, dtype=np.int32)
    inverted = ~codes & 0xFF
    segment = (inverted >> 4) & 0x07
    mantissa = inverted & 0x0F
    magnitude = (((mantissa << 1) | 0x21) << (segment + 2)) - 4 * _ULAW_BIAS
    return np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)


def _alaw_table() -> Pcm:
    """Linear value of each of the 256 A-law codes (midpoint of its interval)."""
    codes = np.arange(256, dtype=np.int32)
    plain = codes ^ _ALAW_TOGGLE
    segment = (plain >> 4) & 0x07
    mantissa = plain & 0x0F
    # Segment 0 has no implicit leading one; the +0x8 centres the value in its step.
    step_units = np.where(segment > 0, mantissa | 0x10, mantissa)
    shift: _I32 = np.maximum(segment - 1, 0)
    magnitude = ((step_units << 4) | 0x08) << shift
    return np.where(plain & 0x80, magnitude, -magnitude).astype(np.int16)


_WIRE_PCM16: Final = np.dtype("<i2")
_NATIVE_IS_WIRE: Final = _WIRE_PCM16 == np.dtype(np.int16)

ULAW_TABLE: Final[Pcm] = _ulaw_table()
ALAW_TABLE: Final[Pcm] = _alaw_table()
ULAW_TABLE.flags.writeable = False
ALAW_TABLE.flags.writeable = False


def ulaw_decode(codes: _U8) -> Pcm:
    """G.711 μ-law codes → 16-bit PCM."""
    return np.take(ULAW_TABLE, codes)


def alaw_decode(codes: _U8) -> Pcm:
    """G.711 A-law codes → 16-bit PCM."""
    return np.take(ALAW_TABLE, codes)


_G711 = (AudioFormat.PCMU, AudioFormat.PCMA)  # one byte a sample; every other is 16-bit


def from_wire(data: bytes, fmt: AudioFormat) -> Pcm:
    """Wire bytes → int16 PCM at ``fmt.rate`` (no resampling). PCM16 comes back as a
    read-only view of ``data`` where the machine is little-endian, as the wire is (no
    copy for 50 appends a second a session; nothing downstream writes to its input)."""
    if fmt not in _G711:  # 16-bit linear (an identity test, not a property: 50 a second)
        if len(data) % 2:
            raise InvalidRequest(
                f"{fmt.value} is 16-bit: got {len(data)} bytes, an odd count",
                code="invalid_audio",
            )
        pcm: Pcm = np.frombuffer(data, dtype=_WIRE_PCM16)
        return pcm if _NATIVE_IS_WIRE else pcm.astype(np.int16)
    codes = np.frombuffer(data, dtype=np.uint8)
    return ulaw_decode(codes) if fmt is AudioFormat.PCMU else alaw_decode(codes)


def to_wire(pcm: Pcm, fmt: AudioFormat) -> bytes:
    """int16 PCM already at ``fmt.rate`` → wire bytes."""
    if fmt not in _G711:
        return pcm.astype("<i2").tobytes()
    codes = ulaw_encode(pcm) if fmt is AudioFormat.PCMU else alaw_encode(pcm)
    return codes.tobytes()


def resample(pcm: Pcm, in_rate: int, out_rate: int, quality: str = "HQ") -> Pcm:
    """One-shot resampling of a whole signal (no state kept)."""
    if in_rate == out_rate or pcm.size == 0:
        # soxr rejects empty input; an empty signal has an empty resampling.
        return pcm if in_rate == out_rate else np.zeros(0, dtype=np.int16)
    out = soxr.resample(np.ascontiguousarray(pcm, dtype=np.int16), in_rate, out_rate, quality)
    return np.asarray(out, dtype=np.int16)


def decode_input(data: bytes, fmt: AudioFormat, target_rate: int) -> Pcm:
    """Client audio bytes → int16 PCM at ``target_rate``.

    Stateless: fine for whole buffers. A stream of small appends should use
    ``from_wire`` and a ``StreamResampler`` so the filter history carries over.
    """
    return resample(from_wire(data, fmt), fmt.rate, target_rate)


def encode_output(pcm: Pcm, source_rate: int, fmt: AudioFormat) -> bytes:
    """int16 PCM at ``source_rate`` → wire bytes of ``fmt`` (stateless, see above)."""
    return to_wire(resample(pcm, source_rate, fmt.rate), fmt)


def duration_ms(n_samples: int, rate: int) -> float:
    """Play time of ``n_samples`` at ``rate`` Hz."""
    return n_samples * 1000.0 / rate


class StreamResampler:
    """Resamples a stream chunk by chunk, carrying filter state across chunks.

    Output lags input by the filter delay; ``flush`` drains it at the end of a
    stream and leaves the resampler ready for a new one. Concatenated outputs
    (with the flush) match one-shot ``resample`` of the concatenated input.

    soxr's "HQ" works in blocks: with 20 ms chunks at 8 ↔ 24 kHz the first
    output comes after ~80 ms, then in bursts every ~60 ms. Where that latency
    matters more than the filter, "QQ" (quick cubic) returns every chunk at once.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.quality = quality
        self._stream: soxr.ResampleStream | None = self._new_stream()

    def _new_stream(self) -> soxr.ResampleStream | None:
        if self.in_rate == self.out_rate:
            return None
        return soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="int16",
                                   quality=self.quality)

    @property
    def identity(self) -> bool:
        return self._stream is None

    def process(self, chunk: Pcm) -> Pcm:
        """Resample one chunk; may return fewer samples than the ratio implies."""
        if self._stream is None:
            return chunk
        out = self._stream.resample_chunk(np.ascontiguousarray(chunk, dtype=np.int16))
        return np.asarray(out, dtype=np.int16)

    def flush(self) -> Pcm:
        """Emit what the filter still holds and start a fresh stream."""
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        tail = self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
        # A new stream rather than clear(): after clear() soxr's int16 output
        # stage (dither) differs by an LSB or two, so runs would not repeat.
        self._stream = self._new_stream()
        return np.asarray(tail, dtype=np.int16)
