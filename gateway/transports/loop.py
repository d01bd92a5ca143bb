"""The one loop that serves an attached socket, whatever its protocol.

Frames in: the codec says what each means, and a command goes to the session's
inbox without waiting (straight from the socket's parser where the frame source
can). Frames out: the session sends typed events to the attachment, which renders
them with the same codec. At the end, the attachment is over and the session told:

- the peer hung up in band (``Hangup``): the session ends, and its end closes the
  socket (the peer may still be reading);
- the peer closed the socket: the codec says whether that ends the session (a
  Realtime 1000; Vonage's hang-up, when ``on_hangup`` runs too) or detaches it,
  resumable, for its grace;
- the socket no longer serves the session (replaced, detached, ended): its input
  no longer counts (R18), and whoever took it away ends it.

One bad frame never ends the connection: a codec's refusal goes back as the
protocol's error, and a bug of ours on one frame fails that frame alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from duplex import commands as c
from duplex.errors import DuplexError, SessionStateError
from gateway.transports.attachment import SocketAttachment
from gateway.transports.codec import Control, Frame, Hangup, Ignore, Keypress, Played, Report

log = logging.getLogger(__name__)

OnHangup = Callable[[], Awaitable[None]]
DROPPED_READ_S = 2.0  # a socket whose send failed: at most this for its close code


async def serve(attachment: SocketAttachment, *, on_hangup: OnHangup | None = None) -> None:
    """Serve ``attachment``'s socket until it ends: read it, then close it, or let
    it linger (a session that ended answers stragglers until the peer hangs up)."""
    try:
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(read(attachment, on_hangup))
            await attachment.ended.wait()
            if attachment.linger_s:
                await asyncio.wait([reader], timeout=attachment.linger_s)
                reader.cancel()
                await attachment.close()
            elif attachment.session.dropped(attachment):
                # a send failed: the peer is closing or gone, and how it closed (read
                # next, at once) says whether the session ends (issue 27)
                await asyncio.wait([reader], timeout=DROPPED_READ_S)
            reader.cancel()
    finally:
        attachment.session.forget(attachment)


async def read(attachment: SocketAttachment, on_hangup: OnHangup | None = None,
               clock: Callable[[], float] = time.time) -> None:
    """Read ``attachment``'s socket into its session until the socket goes, hangs
    up, or no longer serves the session."""
    reader = _Reader(attachment, clock)
    frames, session = attachment.frames, attachment.session
    try:
        await frames.pump(reader.take, reader.handle)
    finally:
        attachment.warnings.flush()
        if frames.delivered:
            log.debug("%s: %d messages went straight from the socket to the session",
                      attachment.name, frames.delivered)
    if reader.let_go or attachment.ended.is_set():
        # A send that failed because the peer was closing let the socket go first;
        # its close still says whether the session ends (a 1000 must: issue 27),
        # unless another socket has attached since.
        if session.dropped(attachment):
            await _peer_closed(attachment, on_hangup, detach=False)
        return
    if reader.hangup is not None:
        session.client_closed(reader.hangup.reason)
        if on_hangup is not None:
            # the session's end may close the socket (and cancel this reader) first
            await asyncio.shield(on_hangup())
        return
    attachment.ended.set()
    await _peer_closed(attachment, on_hangup, detach=True)


async def _peer_closed(attachment: SocketAttachment, on_hangup: OnHangup | None, *,
                       detach: bool) -> None:
    """The peer closed the socket: the codec says whether that ends the session (a
    Realtime 1000; Vonage's hang-up, when ``on_hangup`` runs too) or, ``detach``,
    detaches it."""
    session = attachment.session
    reason = attachment.codec.ends_session(attachment.frames.close_code)
    if reason is not None:
        session.client_closed(reason)
        if on_hangup is not None:  # a carrier that hangs up by closing (Vonage)
            await asyncio.shield(on_hangup())
    elif detach:
        session.request_detach(attachment)


class _Reader:
    """What happens to each frame: taken at once while the session is open and the
    socket serves it; otherwise (or for a hang-up) handled where it may wait."""

    def __init__(self, attachment: SocketAttachment, clock: Callable[[], float]) -> None:
        self.attachment = attachment
        self.session = attachment.session
        self.codec = attachment.codec
        self.clock = clock
        self.hangup: Hangup | None = None
        self.let_go = False  # the socket stopped serving the session

    def take(self, frame: Frame) -> bool:
        """A frame straight from the socket, taken unless the loop must act on it (a
        late command, a replaced socket, a hang-up: False). Never waits, and total:
        whatever the frame holds, the session lives. A hang-up is kept in
        ``hangup``, not acted on. One call a frame (50 a second a session)."""
        session = self.session
        if session.closed.is_set() or not session.serves(self.attachment):
            return False
        attachment = self.attachment
        try:
            parsed = self.codec.parse(frame)
            if isinstance(parsed, Hangup):
                self.hangup = parsed
                return False
            if attachment.unconfirmed:
                attachment.unconfirmed = False
                session.confirm_token(attachment.generation)
            if isinstance(parsed, c.Command):  # nearly every frame: audio
                attachment.submit(parsed)
            else:
                self._control(parsed)
        except Exception:  # a bug of ours on one frame: that frame fails, not the session
            attachment.warnings.warning("failed", "%s: a client message failed",
                                        attachment.name, exc_info=True)
            session.report(DuplexError("the server failed to handle this message",
                                       code="internal_error"))
        return True

    async def handle(self, frame: Frame) -> bool:
        """A frame ``take`` declined; False: stop reading."""
        self.hangup = None  # a hang-up counts only where the session takes it (below)
        session = self.session
        if not session.serves(self.attachment):
            if session.dropped(self.attachment):
                return True  # a send failed: read on (ignoring input) to the close
            self.let_go = True  # replaced or ended: this socket's input no longer counts
            return False
        if session.closed.is_set():
            await self._late(frame)
            return True
        return self.take(frame)  # open and served: declined only for a hang-up

    def _control(self, parsed: Control) -> None:
        attachment = self.attachment
        match parsed:
            case Report(error):
                self.session.report(error)
            case Keypress(digit):
                attachment.submit(c.DtmfReceived(None, digit, self.clock()))
            case Played(response_id):
                self.session.played(response_id)
            case Ignore(kind, why) if why:
                attachment.warnings.warning(kind, "%s: ignored %s", attachment.name, why)
            case _:
                pass  # nothing for the session: a greeting, a start once started

    async def _late(self, frame: Frame) -> None:
        """A frame read after the session ended: where the protocol answers commands,
        refuse it, echoing its event_id. The session is done, so the reader may write."""
        if not self.codec.answers_late:
            return
        try:
            parsed = self.codec.parse(frame)
            event_id = (parsed.event_id if isinstance(parsed, c.Command)
                        else parsed.error.event_id if isinstance(parsed, Report) else None)
            await self.session.refuse_late(SessionStateError(
                "the session is closed", code="session_closed", event_id=event_id))
        except Exception:  # a bug of ours on one frame: that frame fails, not the session
            self.attachment.warnings.warning("failed", "%s: a late client message failed",
                                             self.attachment.name, exc_info=True)
