"""A session's attachment to one socket, whatever protocol the socket speaks.

The session hands it typed events (``Outbound``); the socket's codec renders each
into frames, and the frame source sends them. Realtime sends an event's journaled
text as it is (serialised once); a carrier renders from the event as built.
"""

from __future__ import annotations

import asyncio
import logging

from duplex import commands as c
from duplex.close_codes import CloseCode, close_reason
from duplex.errors import CapacityError, DuplexError
from gateway.log_limits import LogLimiter
from gateway.outbound import Outbound
from gateway.transports.codec import Codec
from gateway.transports.frames import Frames
from gateway.transports.session import Session

log = logging.getLogger(__name__)


class SocketAttachment:
    """One socket serving one attachment generation of a session."""

    def __init__(self, frames: Frames, codec: Codec, session: Session, generation: int, *,
                 extensions: bool, name: str, unconfirmed: bool = False,
                 warnings: LogLimiter | None = None) -> None:
        self.frames = frames
        self.codec = codec
        self.session = session
        self.generation = generation
        # the duplex events a client did not ask for (``session.expired``) go only to
        # a socket that opted in (``gateway.session.attachment.OPT_IN``)
        self.extensions = extensions
        self.name = name  # who the log lines are about: "session sess_…", "call CA…"
        # a resumed socket proves it holds the rotated token by speaking
        self.unconfirmed = unconfirmed
        self.warnings = warnings or LogLimiter(log)  # a peer's junk: one line a while
        self.ended = asyncio.Event()
        self.close_code, self.close_reason, self.linger_s = int(CloseCode.NORMAL), "", 0.0

    async def send(self, out: Outbound) -> None:
        rendered = self.codec.render(out)
        for frame in rendered.frames:
            await self.frames.send(frame)
        if rendered.answer is not None:
            self.submit(rendered.answer)

    async def end(self, code: int, reason: str, *, linger_s: float = 0.0) -> None:
        """Stop serving this socket. With ``linger_s`` (and a protocol whose late
        commands get an answer) the socket stays open that long, or until the peer
        closes it, so late commands are refused rather than lost."""
        if self.ended.is_set():
            return
        linger_s = linger_s if self.codec.answers_late else 0.0
        self.close_code, self.close_reason, self.linger_s = code, close_reason(reason), linger_s
        self.ended.set()
        if not linger_s:
            await self.close()

    async def close(self) -> None:
        await self.frames.close(self.close_code, self.close_reason)

    def submit(self, cmd: c.Command) -> None:
        """Queue ``cmd`` for the session (never waits): a flooded session drops it
        (logged, rate-limited); a refusal goes back to the peer."""
        try:
            self.session.submit(cmd)
        except CapacityError:  # the inbox is full, so an error could not be queued either
            self.warnings.warning("flooded", "%s: session flooded; dropped a client %s",
                                  self.name, type(cmd).__name__)
        except DuplexError as exc:
            self.session.report(exc)
