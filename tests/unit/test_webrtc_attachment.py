"""The WebRTC attachment over a recording data channel and session: what goes on the
channel, what goes on the track, and the barge-in's truncate."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplex import commands as c
from duplex.config import AudioFormat
from duplex.errors import DuplexError
from gateway.outbound import Outbound
from gateway.session.attachment import outbound
from gateway.transports.codec import Frame
from gateway.transports.peer_audio import PeerAudio
from gateway.transports.realtime_codec import RealtimeCodec
from gateway.transports.speaker import Speaker
from gateway.transports.webrtc_attachment import WebRTCAttachment


@dataclass
class Channel:
    sent: list[Frame] = field(default_factory=list)
    close_code: int = 1006
    close_reason: str = ""
    delivered: int = 0

    async def send(self, frame: Frame) -> None:
        self.sent.append(frame)

    async def close(self, code: int, reason: str = "") -> None:
        pass


@dataclass
class Recorder:
    submitted: list[c.Command] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)  # playback marks, by response id

    def submit(self, cmd: c.Command) -> None:
        self.submitted.append(cmd)

    def played(self, response_id: str) -> None:
        self.marks.append(response_id)

    def report(self, error: DuplexError) -> None:
        raise AssertionError(error)


def attached() -> tuple[WebRTCAttachment, Channel, Recorder]:
    channel, session = Channel(), Recorder()
    attachment = WebRTCAttachment(channel, RealtimeCodec(1 << 16), session, 1,  # type: ignore[arg-type]
                                  extensions=False, name="call rtc_test",
                                  audio=PeerAudio(), speaker=Speaker())
    return attachment, channel, session


def delta(ms: int, response_id: str = "resp_1") -> dict[str, Any]:
    audio = base64.b64encode(np.full(24 * ms, 1000, np.int16).tobytes()).decode()
    return {"type": "response.output_audio.delta", "response_id": response_id,
            "item_id": "item_1", "delta": audio}


def types(channel: Channel) -> list[str]:
    return [json.loads(frame)["type"] for frame in channel.sent if isinstance(frame, str)]


async def test_reply_audio_goes_on_the_track_and_the_rest_on_the_channel() -> None:
    attachment, channel, _ = attached()
    await attachment.send(outbound({"type": "session.created", "session": {"audio": {
        "input": {"format": {"type": "audio/pcmu"}},
        "output": {"format": {"type": "audio/pcm", "rate": 24000}}}}}))
    assert attachment.audio.input_format is AudioFormat.PCMU
    await attachment.send(outbound(delta(100)))
    await attachment.send(outbound({**delta(0), "delta": 7}))  # no audio in it: nothing
    await attachment.send(outbound({"type": "response.output_audio_transcript.delta",
                                    "delta": "hi"}))
    await attachment.send(outbound({"type": "response.output_audio.done",
                                    "response_id": "resp_1", "item_id": "item_1"}))
    assert types(channel) == ["session.created", "response.output_audio_transcript.delta",
                              "response.output_audio.done"]
    assert attachment.speaker.playing
    heard = np.concatenate([attachment.speaker.frame() for _ in range(6)])
    assert np.count_nonzero(heard) > 4000  # about 100 ms at 48 kHz


async def test_a_barge_in_truncates_to_what_the_track_played() -> None:
    attachment, channel, session = attached()
    await attachment.send(outbound(delta(500)))
    assert session.marks == []  # queued for the track, not played
    for _ in range(5):
        attachment.speaker.frame()  # the track played 100 ms
    assert session.marks == ["resp_1"]  # the reply's playback mark, once
    await attachment.send(outbound({"type": "input_audio_buffer.speech_started"}))
    assert types(channel) == ["input_audio_buffer.speech_started"]
    assert session.submitted == [c.TruncateItem(None, "item_1", 0, 100)]
    assert not attachment.speaker.playing
    # the client's own output_audio_buffer.clear, once nothing is queued: no truncate
    await attachment.send(outbound({"type": "output_audio_buffer.cleared",
                                    "response_id": "resp_1"}))
    assert len(session.submitted) == 1


async def test_a_replayed_event_is_routed_by_its_text() -> None:
    attachment, channel, _ = attached()
    await attachment.send(Outbound(json.dumps(delta(40))))  # read back: no type, no event
    await attachment.send(Outbound('{"type":"conversation.item.added"}'))
    await attachment.send(Outbound("[1]"))  # not an event object: sent as it is
    await attachment.send(Outbound("not json"))
    assert channel.sent == ['{"type":"conversation.item.added"}', "[1]", "not json"]
    assert attachment.speaker.playing
