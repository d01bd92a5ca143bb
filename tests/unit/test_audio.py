"""Wire audio conversion: G.711 codecs, PCM16 framing, resampling."""

from __future__ import annotations

import warnings
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pytest
from pcm_sizes import in_sizes

from duplex.config import AudioFormat
from duplex.errors import InvalidRequest
from gateway import audio

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
ALL_CODES = np.arange(256, dtype=np.uint8)


def _audioop() -> ModuleType:
    """The stdlib's (deprecated, Sun-derived) G.711 coder as an independent reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module: ModuleType = pytest.importorskip("audioop")
    return module


def _sine(freq: float, seconds: float, rate: int, amp: float = 0.3) -> npt.NDArray[np.int16]:
    t = np.arange(int(seconds * rate)) / rate
    return np.round(amp * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def _encode1(encode: object, x: int) -> int:
    assert callable(encode)
    return int(encode(np.array([x], dtype=np.int16))[0])


# -- G.711 reference values ------------------------------------------------------


@pytest.mark.parametrize(
    ("linear", "code"),
    [
        (0, 0xFF),  # positive zero
        (-1, 0x7F),  # one's-complement magnitude 0: negative zero
        (4, 0xFE),
        (100, 0xF2),
        (-100, 0x73),
        (32767, 0x80),
        (-32768, 0x00),
        (32124, 0x80),
    ],
)
def test_ulaw_encode_reference(linear: int, code: int) -> None:
    assert _encode1(audio.ulaw_encode, linear) == code


@pytest.mark.parametrize(
    ("linear", "code"),
    [
        (0, 0xD5),
        (-1, 0x55),
        (15, 0xD5),
        (16, 0xD4),
        (100, 0xD3),
        (-100, 0x53),
        (32767, 0xAA),
        (-32768, 0x2A),
    ],
)
def test_alaw_encode_reference(linear: int, code: int) -> None:
    assert _encode1(audio.alaw_encode, linear) == code


@pytest.mark.parametrize(
    ("code", "linear"),
    [(0xFF, 0), (0x7F, 0), (0xFE, 8), (0xF0, 120), (0xEF, 132), (0x80, 32124), (0x00, -32124)],
)
def test_ulaw_decode_reference(code: int, linear: int) -> None:
    assert int(audio.ulaw_decode(np.array([code], dtype=np.uint8))[0]) == linear


@pytest.mark.parametrize(
    ("code", "linear"),
    [(0xD5, 8), (0x55, -8), (0xD4, 24), (0xC5, 264), (0xAA, 32256), (0x2A, -32256)],
)
def test_alaw_decode_reference(code: int, linear: int) -> None:
    assert int(audio.alaw_decode(np.array([code], dtype=np.uint8))[0]) == linear


# -- G.711 table properties ------------------------------------------------------


@pytest.mark.parametrize("table", [audio.ULAW_TABLE, audio.ALAW_TABLE], ids=["ulaw", "alaw"])
def test_decode_table_is_sign_symmetric(table: npt.NDArray[np.int16]) -> None:
    # Flipping the sign bit negates the value.
    assert np.array_equal(table[ALL_CODES ^ 0x80], -table)


def test_decode_tables_are_monotonic() -> None:
    positive_ulaw = audio.ULAW_TABLE[0x80:]  # 0x80 is the largest, 0xFF is zero
    assert np.all(np.diff(positive_ulaw.astype(np.int32)) < 0)
    plain = ALL_CODES ^ 0x55  # A-law codes in segment/mantissa order
    positive_alaw = audio.ALAW_TABLE[np.sort(ALL_CODES[plain >= 0x80]) ^ 0x55]
    assert np.all(np.diff(positive_alaw.astype(np.int32)) > 0)
    assert len(np.unique(audio.ULAW_TABLE)) == 255  # 0xFF and 0x7F are both zero
    assert len(np.unique(audio.ALAW_TABLE)) == 256  # A-law has no zero level


@pytest.mark.parametrize(
    ("encode", "decode"),
    [(audio.ulaw_encode, audio.ulaw_decode), (audio.alaw_encode, audio.alaw_decode)],
    ids=["ulaw", "alaw"],
)
def test_every_code_round_trips(encode: object, decode: object) -> None:
    assert callable(encode) and callable(decode)
    again = encode(decode(ALL_CODES))
    expected = ALL_CODES.copy()
    if encode is audio.ulaw_encode:
        expected[0x7F] = 0xFF  # negative zero decodes to 0, which encodes as positive zero
    assert np.array_equal(again, expected)


def test_ulaw_error_is_within_half_a_step() -> None:
    codes = audio.ulaw_encode(ALL_INT16)
    err = np.abs(audio.ulaw_decode(codes).astype(np.int32) - ALL_INT16)
    segment = ((~codes.astype(np.int32)) >> 4) & 0x07
    in_range = np.abs(ALL_INT16.astype(np.int32)) <= 32635  # G.711 clips above this
    # Steps are 8 << segment; +4 covers the one's-complement skew of negatives.
    assert np.all(err[in_range] <= (4 << segment[in_range]) + 4)
    assert err.max() == 32768 - 32124  # worst case is the clipped bottom


def test_alaw_error_is_within_half_a_step() -> None:
    codes = audio.alaw_encode(ALL_INT16)
    err = np.abs(audio.alaw_decode(codes).astype(np.int32) - ALL_INT16)
    segment = ((codes.astype(np.int32) ^ 0x55) >> 4) & 0x07
    assert np.all(err <= (8 << np.maximum(segment - 1, 0)) + 1)
    assert err.max() <= 512


# -- against the stdlib's coder ------------------------------------------------


def test_decode_tables_match_audioop() -> None:
    ref = _audioop()
    ulaw = np.frombuffer(ref.ulaw2lin(ALL_CODES.tobytes(), 2), dtype="<i2")
    alaw = np.frombuffer(ref.alaw2lin(ALL_CODES.tobytes(), 2), dtype="<i2")
    assert np.array_equal(ulaw, audio.ULAW_TABLE)
    assert np.array_equal(alaw, audio.ALAW_TABLE)


def test_encoders_match_audioop() -> None:
    ref = _audioop()
    alaw = np.frombuffer(ref.lin2alaw(ALL_INT16.tobytes(), 2), dtype=np.uint8)
    assert np.array_equal(audio.alaw_encode(ALL_INT16), alaw)
    ulaw = np.frombuffer(ref.lin2ulaw(ALL_INT16.tobytes(), 2), dtype=np.uint8)
    ours = audio.ulaw_encode(ALL_INT16)
    non_negative = ALL_INT16 >= 0
    assert np.array_equal(ours[non_negative], ulaw[non_negative])
    # audioop negates (Sun's coder); G.711's reference takes the one's complement,
    # so negatives may land one code over at an interval edge, never further.
    assert np.all(ours >> 7 == ulaw >> 7)
    assert np.abs(ours.astype(np.int32) - ulaw).max() == 1


# -- wire framing ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [AudioFormat.PCM16, AudioFormat.L16_8K, AudioFormat.L16_16K])
def test_pcm16_is_little_endian(fmt: AudioFormat) -> None:
    pcm = audio.from_wire(b"\x01\x00\xff\xff\x00\x80", fmt)
    assert pcm.dtype == np.int16
    assert pcm.tolist() == [1, -1, -32768]
    assert audio.to_wire(pcm, fmt) == b"\x01\x00\xff\xff\x00\x80"


def test_carrier_pcm_resamples_at_its_rate() -> None:
    second = np.zeros(24000, dtype=np.int16)
    assert len(audio.encode_output(second, 24000, AudioFormat.L16_16K)) == 2 * 16000
    assert audio.decode_input(b"\x00" * 2 * 8000, AudioFormat.L16_8K, 24000).size == 24000


@pytest.mark.parametrize("n_bytes", [1, 3, 961])
def test_odd_pcm16_is_invalid_audio(n_bytes: int) -> None:
    with pytest.raises(InvalidRequest) as caught:
        audio.decode_input(b"\x00" * n_bytes, AudioFormat.PCM16, 24000)
    assert caught.value.code == "invalid_audio"
    assert caught.value.to_wire()["type"] == "invalid_request_error"
    assert f"{n_bytes} bytes" in caught.value.message and "odd" in caught.value.message


@pytest.mark.parametrize("fmt", [AudioFormat.PCMU, AudioFormat.PCMA])
def test_g711_takes_any_byte_count(fmt: AudioFormat) -> None:
    assert audio.from_wire(b"\xff\xd5\x00", fmt).shape == (3,)


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_empty_audio(fmt: AudioFormat) -> None:
    assert audio.decode_input(b"", fmt, 24000).size == 0
    assert audio.encode_output(np.zeros(0, dtype=np.int16), 24000, fmt) == b""


# -- rates and durations -------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "n_bytes", "target_rate", "n_samples"),
    [
        (AudioFormat.PCMU, 160, 24000, 480),  # a 20 ms Twilio frame
        (AudioFormat.PCMA, 160, 24000, 480),
        (AudioFormat.PCMU, 8000, 16000, 16000),
        (AudioFormat.PCM16, 960, 24000, 480),
        (AudioFormat.PCM16, 4800, 8000, 800),
        (AudioFormat.PCM16, 48000, 16000, 16000),
    ],
)
def test_decode_input_rates(fmt: AudioFormat, n_bytes: int, target_rate: int,
                            n_samples: int) -> None:
    pcm = audio.decode_input(b"\x00" * n_bytes, fmt, target_rate)
    assert pcm.dtype == np.int16 and pcm.shape == (n_samples,)
    wire_ms = audio.duration_ms(n_bytes // fmt.bytes_per_sample, fmt.rate)
    assert audio.duration_ms(n_samples, target_rate) == wire_ms


@pytest.mark.parametrize(
    ("n_samples", "source_rate", "fmt", "n_bytes"),
    [
        (480, 24000, AudioFormat.PCMU, 160),
        (480, 24000, AudioFormat.PCMA, 160),
        (480, 24000, AudioFormat.PCM16, 960),
        (320, 16000, AudioFormat.PCMU, 160),
        (160, 8000, AudioFormat.PCM16, 960),
    ],
)
def test_encode_output_rates(n_samples: int, source_rate: int, fmt: AudioFormat,
                             n_bytes: int) -> None:
    assert len(audio.encode_output(np.zeros(n_samples, np.int16), source_rate, fmt)) == n_bytes


@pytest.mark.parametrize(
    ("n_samples", "rate", "ms"),
    [(0, 8000, 0.0), (160, 8000, 20.0), (480, 24000, 20.0), (1, 24000, 1 / 24), (24000, 24000,
     1000.0), (441, 22050, 20.0)],
)
def test_duration_ms(n_samples: int, rate: int, ms: float) -> None:
    assert audio.duration_ms(n_samples, rate) == pytest.approx(ms)


@pytest.mark.parametrize("fmt", [AudioFormat.PCMU, AudioFormat.PCMA])
def test_telephone_round_trip_keeps_a_tone(fmt: AudioFormat) -> None:
    tone = _sine(440, 1.0, 24000)
    back = audio.decode_input(audio.encode_output(tone, 24000, fmt), fmt, 24000)
    assert back.shape == tone.shape
    middle = slice(2400, -2400)  # away from the resampler's edges
    noise = (back[middle].astype(np.float64) - tone[middle]) ** 2
    snr_db = 10 * np.log10(np.mean(tone[middle].astype(np.float64) ** 2) / np.mean(noise))
    assert snr_db > 30


# -- streaming resampler -------------------------------------------------------


@pytest.mark.parametrize(("in_rate", "out_rate"),
                         [(8000, 24000), (24000, 8000), (16000, 24000), (24000, 22050)])
@pytest.mark.parametrize("sizes", [[160], [480], [7, 1000, 33], [1]], ids=str)
@pytest.mark.parametrize("quality", ["HQ", "QQ"])
def test_streaming_matches_one_shot(in_rate: int, out_rate: int, sizes: list[int],
                                    quality: str) -> None:
    rng = np.random.default_rng(7)
    seconds = 0.05 if sizes == [1] else 0.5
    signal = _sine(440, seconds, in_rate) + rng.integers(-500, 500, int(seconds * in_rate),
                                                         dtype=np.int16)
    resampler = audio.StreamResampler(in_rate, out_rate, quality)
    parts = [resampler.process(chunk) for chunk in in_sizes(signal, sizes)]
    streamed = np.concatenate([*parts, resampler.flush()])
    one_shot = audio.resample(signal, in_rate, out_rate, quality)
    assert streamed.dtype == np.int16
    assert streamed.shape == one_shot.shape
    assert np.abs(streamed.astype(np.int32) - one_shot).max() <= 3


def test_resampler_is_reusable_after_flush() -> None:
    signal = _sine(300, 0.2, 8000)
    resampler = audio.StreamResampler(8000, 24000)
    first = np.concatenate([resampler.process(signal), resampler.flush()])
    second = np.concatenate([resampler.process(signal), resampler.flush()])
    assert np.array_equal(first, second)


def test_quick_quality_streams_without_lag() -> None:
    resampler = audio.StreamResampler(8000, 24000, quality="QQ")
    sizes = [resampler.process(_sine(300, 0.02, 8000)).size for _ in range(5)]
    assert sizes[0] > 0 and sizes[1:] == [480] * 4


def test_resampler_identity_when_rates_match() -> None:
    resampler = audio.StreamResampler(24000, 24000)
    chunk = _sine(440, 0.02, 24000)
    assert resampler.identity
    assert np.array_equal(resampler.process(chunk), chunk)
    assert resampler.flush().size == 0
