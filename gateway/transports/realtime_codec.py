"""The OpenAI Realtime protocol as a codec: client events in, server events out.

GA and beta are one codec: their client events decode alike (``duplex.wire``), and
the dialect is the session's (``beta``, chosen at the handshake and given to the
session when it is opened or resumed): the session's events are built, journaled
and replayed in its dialect, so ``render`` sends each event's journaled text as it
is, serialised once.
"""

from __future__ import annotations

from duplex import commands as c
from duplex import wire
from duplex.close_codes import CloseCode
from duplex.errors import DuplexError, InvalidRequest
from gateway.outbound import Outbound
from gateway.transports.codec import Frame, Inbound, Rendered, Report


class RealtimeCodec:
    answers_late = True

    def __init__(self, max_bytes: int, *, beta: bool = False, resumable: bool = True) -> None:
        self.max_bytes = max_bytes
        self.beta = beta  # the session speaks the beta dialect (OpenAI-Beta: realtime=v1)
        self.resumable = resumable  # a drop detaches the session (else it ends it)

    def parse(self, frame: Frame) -> Inbound:
        try:
            if isinstance(frame, str):
                # wire.decode_command, unrolled: every client frame
                return c.parse_command(wire.decode_json(frame, max_bytes=self.max_bytes))
            # Extension: binary frames are raw audio in the session's input format.
            if len(frame) > self.max_bytes:
                raise InvalidRequest(f"message of {len(frame)} bytes exceeds the "
                                     f"{self.max_bytes}-byte limit", code="event_too_large")
            return c.AppendAudio(None, frame)
        except DuplexError as exc:
            return Report(exc)

    def render(self, out: Outbound) -> Rendered:
        return Rendered((out.text,))

    def ends_session(self, close_code: int) -> str | None:
        """A 1000 close ends the session; any other drop detaches it, unless the
        client asked for no resume (``?resumable=0``)."""
        if close_code == CloseCode.NORMAL:
            return "client_close"
        return None if self.resumable else "disconnect"
