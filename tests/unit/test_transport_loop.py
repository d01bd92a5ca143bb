"""The shared transport loop over a scripted frame source and a recording session:
what each codec's frames do to the session, and how a socket's end is told."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from duplex import commands as c
from duplex.close_codes import CloseCode
from duplex.errors import CapacityError, DuplexError
from gateway.session.attachment import Attachment, outbound
from gateway.telephony.twilio_codec import TwilioCodec
from gateway.transports.attachment import SocketAttachment
from gateway.transports.codec import Codec, Frame
from gateway.transports.frames import Handle, Take
from gateway.transports.loop import read, serve
from gateway.transports.realtime_codec import RealtimeCodec

LIMIT = 64 * 1024


@dataclass
class Script:
    """A frame source that offers its frames as ``SocketFrames`` does: to ``take``,
    then what it declines to ``handle``; then the peer closes with ``code``."""

    frames: list[Frame]
    code: int = CloseCode.ABNORMAL
    direct: bool = True  # frames come "from the parser" (counted as delivered)
    stays_open: bool = False  # after its frames the peer waits, until the reader is cancelled
    waiting: asyncio.Event = field(default_factory=asyncio.Event)  # ... as it does now
    sent: list[Frame] = field(default_factory=list)
    closed: tuple[int, str] | None = None
    close_code: int = CloseCode.ABNORMAL
    close_reason: str = ""
    delivered: int = 0

    async def receive(self) -> Frame | None:
        raise AssertionError("the loop reads through pump")

    async def pump(self, take: Take, handle: Handle) -> None:
        for frame in self.frames:
            if take(frame):
                self.delivered += self.direct
            elif not await handle(frame):
                return
        if self.stays_open:
            self.waiting.set()
            await asyncio.Event().wait()
        self.close_code = self.code

    async def send(self, frame: Frame) -> None:
        self.sent.append(frame)

    async def close(self, code: int, reason: str = "") -> None:
        self.closed = (code, reason)


@dataclass
class Recorder:
    """A session that records what the transport asks of it."""

    session_id: str = "sess_test"
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    submitted: list[c.Command] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    attachment: Attachment | None = None
    gone: Attachment | None = None  # let go for a failed send, none attached since
    forgotten: list[Attachment] = field(default_factory=list)  # sockets served to the end
    full: bool = False

    def submit(self, cmd: c.Command) -> None:
        if self.full:
            raise CapacityError("full")
        self.submitted.append(cmd)

    def report(self, error: DuplexError) -> None:
        self.calls.append(("report", error.code))

    def request_close(self, reason: str) -> None:
        self.calls.append(("request_close", reason))

    def client_closed(self, reason: str) -> None:
        self.calls.append(("client_closed", reason))

    def request_detach(self, attachment: Attachment) -> None:
        self.calls.append(("request_detach", attachment.generation))

    def confirm_token(self, generation: int) -> None:
        self.calls.append(("confirm_token", generation))

    async def attach(self, attachment: Attachment, *, resume_token: str,
                     cursor: int | None) -> bool:
        self.attachment = attachment
        return True

    def serves(self, attachment: Attachment) -> bool:
        return self.attachment is attachment

    def dropped(self, attachment: Attachment) -> bool:
        return self.gone is attachment

    def forget(self, attachment: Attachment) -> None:
        self.forgotten.append(attachment)

    def let_go(self) -> Attachment | None:
        attachment, self.attachment = self.attachment, None
        return attachment

    async def refuse_late(self, error: DuplexError) -> None:
        self.calls.append(("refuse_late", error.event_id))


async def attached(codec: Codec, frames: list[Frame], **script: Any
                   ) -> tuple[SocketAttachment, Script, Recorder]:
    source, session = Script(frames, **script), Recorder()
    attachment = SocketAttachment(source, codec, session, 3, extensions=False, name="test")
    await session.attach(attachment, resume_token="t", cursor=None)
    return attachment, source, session


def cmd(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


async def test_realtime_frames_become_commands_and_errors_in_order() -> None:
    frames: list[Frame] = [cmd({"type": "session.heartbeat", "event_id": "e1"}), b"\0\0",
                           "not json", cmd({"type": "response.create"})]
    attachment, source, session = await attached(RealtimeCodec(LIMIT), frames)
    await read(attachment)
    assert [type(x) for x in session.submitted] == [c.Heartbeat, c.AppendAudio,
                                                    c.CreateResponse]
    assert session.calls == [("report", "invalid_json"), ("request_detach", 3)]
    assert source.delivered == 4 and attachment.ended.is_set()


@pytest.mark.parametrize(("code", "resumable", "told"), [
    (CloseCode.NORMAL, True, ("client_closed", "client_close")),
    (CloseCode.ABNORMAL, True, ("request_detach", 3)),
    (CloseCode.GOING_AWAY, False, ("client_closed", "disconnect")),
])
async def test_the_peers_close_ends_or_detaches_as_the_codec_says(
        code: int, resumable: bool, told: tuple[str, Any]) -> None:
    attachment, _, session = await attached(RealtimeCodec(LIMIT, resumable=resumable), [],
                                            code=code)
    await read(attachment)
    assert session.calls == [told]


@pytest.mark.parametrize(("code", "told"), [
    (CloseCode.NORMAL, [("client_closed", "client_close")]),
    (CloseCode.ABNORMAL, []),  # detached already: nothing more to tell
])
async def test_a_socket_let_go_for_a_failed_send_still_ends_the_session_on_1000(
        code: int, told: list[tuple[str, Any]]) -> None:
    """The send failed because the peer was closing, and the session let the socket
    go before the reader saw the close: the 1000 still ends it (issue 27)."""
    attachment, _, session = await attached(RealtimeCodec(LIMIT), [], code=code)
    session.gone = session.let_go()
    await attachment.end(CloseCode.GOING_AWAY, "detached")  # the outbox's detach
    await read(attachment)
    assert session.calls == told


async def test_a_resumed_socket_confirms_its_token_by_speaking() -> None:
    attachment, _, session = await attached(RealtimeCodec(LIMIT), ["junk", "junk"])
    attachment.unconfirmed = True
    await read(attachment)
    assert session.calls[:2] == [("confirm_token", 3), ("report", "invalid_json")]
    assert session.calls.count(("confirm_token", 3)) == 1


async def test_frames_after_the_end_are_refused_with_their_event_id() -> None:
    frames: list[Frame] = [cmd({"type": "session.heartbeat", "event_id": "late1"}),
                           '{"event_id": "late2"', b"\0"]
    attachment, source, session = await attached(RealtimeCodec(LIMIT), frames)
    session.closed.set()
    await read(attachment)
    assert session.calls[:3] == [("refuse_late", "late1"), ("refuse_late", None),
                                 ("refuse_late", None)]
    assert session.submitted == [] and source.delivered == 0


async def test_a_replaced_socket_stops_reading_and_tells_nobody() -> None:
    attachment, _, session = await attached(RealtimeCodec(LIMIT), ["{}", "{}"])
    session.let_go()
    await read(attachment)
    assert session.calls == [] and session.submitted == []
    assert not attachment.ended.is_set()  # whoever took it away ends it


async def test_a_flooded_session_drops_the_frame_and_reads_on() -> None:
    attachment, _, session = await attached(RealtimeCodec(LIMIT), [b"\0", b"\0"])
    session.full = True
    await read(attachment)
    assert session.calls == [("request_detach", 3)]


async def test_a_codec_bug_fails_that_frame_alone() -> None:
    class Broken(RealtimeCodec):
        def parse(self, frame: Frame) -> Any:
            if frame == "boom":
                raise ZeroDivisionError
            return super().parse(frame)

    attachment, _, session = await attached(Broken(LIMIT), ["boom", b"\0"])
    await read(attachment)
    assert session.calls[0] == ("report", "internal_error")
    assert [type(x) for x in session.submitted] == [c.AppendAudio]


SID, CALL = "MZ1", "CA1"
START = cmd({"event": "start", "streamSid": SID, "start": {
    "streamSid": SID, "callSid": CALL, "mediaFormat": {"encoding": "audio/x-mulaw",
                                                       "sampleRate": 8000}}})


def twilio(event: str, **body: Any) -> str:
    return cmd({"event": event, "streamSid": SID, event: body})


async def test_a_twilio_stop_ends_the_session_which_closes_the_socket() -> None:
    codec = TwilioCodec(LIMIT)
    codec.parse(START)
    frames = [twilio("dtmf", digit="5"), twilio("media", payload="AAA="), twilio("stop"),
              twilio("media", payload="AAA=")]
    attachment, _, session = await attached(codec, frames)
    hung_up: list[bool] = []

    async def forget() -> None:
        hung_up.append(True)

    await read(attachment, forget, clock=lambda: 12.5)
    assert session.submitted == [c.DtmfReceived(None, "5", 12.5),
                                 c.AppendAudio(None, b"\0\0")]
    assert session.calls == [("client_closed", "twilio_stop")] and hung_up == [True]
    assert not attachment.ended.is_set()  # the session's end closes it


async def test_a_twilio_drop_detaches_whatever_the_code() -> None:
    codec = TwilioCodec(LIMIT)
    codec.parse(START)
    attachment, _, session = await attached(codec, [], code=CloseCode.NORMAL)
    await read(attachment)
    assert session.calls == [("request_detach", 3)]


async def test_a_twilio_barge_in_clears_and_answers_the_truncate() -> None:
    codec = TwilioCodec(LIMIT)
    codec.parse(START)
    attachment, source, session = await attached(codec, [])
    await attachment.send(outbound({"type": "response.output_audio.delta",
                                    "response_id": "resp_1", "item_id": "item_1",
                                    "delta": "AAAA"}))
    await attachment.send(outbound({"type": "input_audio_buffer.speech_started"}))
    assert [json.loads(f)["event"] for f in source.sent] == ["media", "mark", "clear"]
    assert session.submitted == [c.TruncateItem(None, "item_1", 0, 0)]


async def test_an_ended_session_lingers_only_where_late_commands_are_answered() -> None:
    realtime, rt_source, _ = await attached(RealtimeCodec(LIMIT), [])
    await realtime.end(CloseCode.NORMAL, "done", linger_s=2.0)
    assert realtime.linger_s == 2.0 and rt_source.closed is None
    carrier, tw_source, _ = await attached(TwilioCodec(LIMIT), [])
    await carrier.end(CloseCode.NORMAL, "done", linger_s=2.0)
    assert carrier.linger_s == 0.0 and tw_source.closed == (CloseCode.NORMAL, "done")


async def test_serve_returns_once_the_session_ends_the_socket() -> None:
    attachment, source, session = await attached(RealtimeCodec(LIMIT), [b"\0"],
                                                 stays_open=True)
    served = asyncio.create_task(serve(attachment))
    await source.waiting.wait()  # the reader took the frame and waits for more
    assert [type(x) for x in session.submitted] == [c.AppendAudio]
    await attachment.end(CloseCode.SESSION_REPLACED, "replaced")
    await asyncio.wait_for(served, 10)
    assert source.closed == (CloseCode.SESSION_REPLACED, "replaced")
    assert session.calls == []  # the session ended it: nothing to tell it
    assert session.forgotten == [attachment]  # it holds the socket no longer (no cycle)
