"""A WebRTC call's audio, no I/O: the session's formats ⇄ the 48 kHz tracks, and the
speaker's queue with its barge-in truncate to what was played."""

from __future__ import annotations

import numpy as np

from duplex import commands as c
from duplex.config import AudioFormat
from gateway.transports.peer_audio import TRACK_RATE, PeerAudio, mono
from gateway.transports.speaker import FRAME_SAMPLES, Speaker


def ramp(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.int16)


def test_the_speaker_plays_a_reply_frame_by_frame_then_silence() -> None:
    speaker = Speaker()
    assert not speaker.frame().any() and not speaker.playing
    speaker.queue("resp_1", "item_1", ramp(FRAME_SAMPLES // 2))
    speaker.queue("resp_1", "item_1", ramp(FRAME_SAMPLES))
    speaker.queue("resp_1", "item_1", np.zeros(0, np.int16))  # an empty chunk adds nothing
    first = speaker.frame()
    assert first.size == FRAME_SAMPLES
    assert list(first[:3]) == [1, 2, 3] and first[FRAME_SAMPLES // 2] == 1
    second = speaker.frame()  # the rest, padded with silence
    assert second.size == FRAME_SAMPLES and second[FRAME_SAMPLES // 2:].sum() == 0
    assert not speaker.playing
    assert speaker.barge_in() is None  # all of it was played: nothing to truncate


def test_a_barge_in_drops_the_unplayed_audio_and_truncates_to_what_was_played() -> None:
    speaker = Speaker()
    assert speaker.barge_in() is None  # no reply yet
    speaker.queue("resp_1", "item_1", ramp(TRACK_RATE))  # one second
    for _ in range(10):  # 200 ms played
        speaker.frame()
    assert speaker.playing
    assert speaker.barge_in() == c.TruncateItem(None, "item_1", 0, 200)
    assert not speaker.playing and not speaker.frame().any()
    assert speaker.barge_in() is None  # once
    # a new reply starts its own count
    speaker.queue("resp_2", "item_2", ramp(FRAME_SAMPLES * 3))
    speaker.frame()
    assert speaker.barge_in() == c.TruncateItem(None, "item_2", 0, 20)


def test_the_microphone_is_resampled_to_the_sessions_input_format() -> None:
    audio = PeerAudio()
    tone = (8000 * np.sin(np.arange(TRACK_RATE // 10) * 2 * np.pi * 440 / TRACK_RATE))
    pcm = tone.astype(np.int16)
    as_pcm16 = audio.mic(pcm)
    assert abs(len(as_pcm16) - 2 * 2400) <= 2 * 64  # 100 ms at 24 kHz, 16-bit
    audio.follow({"audio": {"input": {"format": {"type": "audio/pcmu"}},
                            "output": {"format": {"type": "audio/pcma"}}}})
    assert audio.input_format is AudioFormat.PCMU and audio.output_format is AudioFormat.PCMA
    assert abs(len(audio.mic(pcm)) - 800) <= 64  # 100 ms of μ-law at 8 kHz: a byte a sample
    reply = audio.reply(bytes(800))  # 100 ms of A-law → 48 kHz
    assert abs(reply.size - 4800) <= 256
    assert audio.reply_ended().dtype == np.int16


def test_formats_it_cannot_read_leave_the_formats_as_they_were() -> None:
    audio = PeerAudio()
    for session in (None, {}, {"audio": 1}, {"audio": {"input": {"format": {"type": "x"}}}},
                    {"audio": {"input": {"format": "audio/pcmu"}}}, {"audio": {"output": 2}}):
        audio.follow(session)
    assert audio.input_format is AudioFormat.PCM16 and audio.output_format is AudioFormat.PCM16
    audio.follow({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}})
    assert audio.input_format is AudioFormat.PCM16


def test_mono_takes_the_first_channel_of_an_interleaved_frame() -> None:
    stereo = np.array([[1, -1, 2, -2, 3, -3]], dtype=np.int16)
    assert list(mono(stereo, 2)) == [1, 2, 3]
    assert list(mono(stereo, 1)) == [1, -1, 2, -2, 3, -3]
