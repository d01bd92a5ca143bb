"""A wire protocol as the gateway sees it: a codec, with no I/O.

A codec turns one inbound frame into what it means (``parse``) and one outbound
event into the frames that carry it (``render``). It touches no socket, store or
clock, so it can be driven (and fuzzed) by a plain function call; the shared loop
(``gateway.transports.loop``) does the reading, the sending and the session's
bookkeeping for every codec alike.

What a frame means is a command for the session (``duplex.commands``) or one of
the transport controls below. ``parse`` is total: junk is an ``Ignore`` (the
carriers: nothing to answer it with) or a ``Report`` (Realtime: the client hears
an ``error``), never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from duplex import commands as c
from duplex.errors import DuplexError
from gateway.outbound import Outbound

Frame = str | bytes  # one WebSocket message: text, or binary


@dataclass(frozen=True, slots=True)
class Ignore:
    """A frame with nothing for the session. With ``why`` the transport logs it
    (rate-limited per ``kind``: a peer can send junk at will); without, the frame
    was expected and carries nothing (Twilio's second ``start``, an outbound track)."""

    kind: str = ""
    why: str = ""


QUIET = Ignore()


@dataclass(frozen=True, slots=True)
class Report:
    """A frame the peer hears about: ``error`` goes back in the protocol's own shape.

    The error is kept without the traceback and the exceptions it was raised
    from: a report outlives its parse, and a traceback holds the frames it went
    through, whose ``f_back`` reaches the reader that holds this report. That
    reference cycle (keeping the frame's text and the reader's locals) was left
    by every refused frame, and only a full collection frees one (gateway/heap.py)."""

    error: DuplexError

    def __post_init__(self) -> None:
        self.error.__traceback__ = self.error.__context__ = self.error.__cause__ = None


@dataclass(frozen=True, slots=True)
class Keypress:
    """A keypad digit (DTMF); the transport stamps when it arrived."""

    digit: str


@dataclass(frozen=True, slots=True)
class Played:
    """The peer says it has played some of ``response_id``'s audio (a carrier
    echoed the reply's first playback point): the reply's playback mark."""

    response_id: str


@dataclass(frozen=True, slots=True)
class Hangup:
    """The peer ended the call in band (Twilio's ``stop``): the session ends with
    ``reason``, and the session's end closes the socket."""

    reason: str


@dataclass(frozen=True, slots=True)
class Hello:
    """A carrier's greeting before its start (Twilio's ``connected``): nothing for
    the session, but a relay to the session's owner passes it on ahead of the start."""


@dataclass(frozen=True, slots=True)
class StreamStart:
    """A carrier's media stream begins: which call, and what our webhook's answer
    asked it to pass back (``parameters``: the stream token, the instructions)."""

    stream_id: str
    call_id: str
    parameters: Mapping[str, object]
    audio_format: str  # the session's audio format both ways, e.g. "audio/pcmu"


@dataclass(frozen=True, slots=True)
class Refuse:
    """A start this gateway cannot serve (e.g. a media format it does not speak):
    the stream is closed with ``why``."""

    why: str


Control = Ignore | Report | Keypress | Played | Hangup | Hello | StreamStart | Refuse
Inbound = c.Command | Control


@dataclass(slots=True)  # one per event sent: a frozen one costs twice as much to build
class Rendered:
    """One outbound event in a protocol: the frames to send, in order, and what the
    transport itself answers the session (Twilio: the truncate of a barge-in, at
    the playback its marks acknowledged). Not to be changed once made."""

    frames: tuple[Frame, ...] = ()
    answer: c.Command | None = None


NOTHING = Rendered()


class Codec(Protocol):
    """One socket's wire protocol. A codec may keep state (a stream id, what the
    peer acknowledged playing) but does no I/O."""

    # a command read after the session ended gets a refusal naming its event_id
    # (Realtime); False: the peer sends nothing a refusal would answer (carriers)
    answers_late: bool

    def parse(self, frame: Frame) -> Inbound:
        """What one inbound frame means; total."""
        ...

    def render(self, out: Outbound) -> Rendered:
        """One server event as this protocol's frames; total."""
        ...

    def ends_session(self, close_code: int) -> str | None:
        """Why the session ends when the peer closes the socket with ``close_code``;
        None when the session detaches instead (and may be resumed)."""
        ...
