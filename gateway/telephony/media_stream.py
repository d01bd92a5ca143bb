"""The media-stream protocol Twilio set and Telnyx and Exotel follow, read with no I/O.

Its messages are JSON named by ``event``: ``connected``, then ``start`` (the call,
the stream, the media format), then ``media`` (the caller's audio, base64),
``dtmf`` (a key), ``mark`` (the echo of one of our playback points) and ``stop``
(the hang-up). Every message after the start names its stream; one naming another
is ignored, but a ``stop`` ends the call whichever stream it names. What each
carrier says its own way is the start (``_start``), the field that names the
stream, and the caller's audio (``_audio_in``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from duplex import commands as c
from gateway.telephony.carrier_json import (
    body_of,
    inbound_payload,
    keypress,
    played,
    read_event,
    unknown_event,
)
from gateway.telephony.playback import Playback
from gateway.transports.codec import (
    QUIET,
    Frame,
    Hangup,
    Hello,
    Ignore,
    Inbound,
    Refuse,
    StreamStart,
)


class MediaStreamParse(ABC):
    """A media-stream codec's ``parse``, with the carrier's start and audio its own."""

    stream_field: str  # what names the stream in each message ("streamSid", …)
    other_stream: str  # the Ignore kind of a message naming another stream
    stop_reason: str  # the Hangup's reason for a ``stop``

    max_bytes: int
    stream_id: str | None  # once started
    call_id: str

    def parse(self, frame: Frame) -> Inbound:
        read = read_event(frame, self.max_bytes)
        if isinstance(read, Ignore):
            return read
        event, msg = read
        if self.stream_id is None:
            if event == "connected":
                return Hello()
            return self._start(msg) if event == "start" else QUIET  # nothing is ours before
        if event == "stop":  # whichever stream it names: the call is over
            return Hangup(self.stop_reason)
        if msg.get(self.stream_field) != self.stream_id:
            return Ignore(self.other_stream, f"{event[:40]!r} for another stream")
        if event in ("connected", "start"):
            return QUIET  # said again: nothing new
        return self._started(event, msg)

    def _started(self, event: str, msg: dict[str, Any]) -> Inbound:
        """A message of the started stream, other than a greeting or start again."""
        body = body_of(event, msg)
        if isinstance(body, Ignore):
            return body
        match event:
            case "media":
                audio = self._audio_in(body)
                return audio if isinstance(audio, Ignore) else c.AppendAudio(None, audio)
            case "mark":
                return played("mark", body.get("name"), self._playback())
            case "dtmf":
                return keypress(body)
            case other:
                return unknown_event(other)

    @abstractmethod
    def _start(self, msg: dict[str, Any]) -> StreamStart | Refuse:
        """The stream's start: its ids and format taken (``stream_id`` set), or refused."""

    @abstractmethod
    def _playback(self) -> Playback:
        """Where the marks of the started stream are booked."""

    def _audio_in(self, body: dict[str, Any]) -> bytes | Ignore:
        """A ``media`` body's audio as the session takes it."""
        return inbound_payload(body)

    def _call(self) -> str:
        return self.call_id

    def _stream_message(self, message: dict[str, Any]) -> str:
        """One of our messages, naming the stream as the carrier's own do."""
        return json.dumps({**message, self.stream_field: self.stream_id})
