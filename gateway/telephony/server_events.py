"""Which of the session's server events a carrier acts on, with no I/O.

Every carrier codec's ``render`` hears the same few: reply audio (each
``response.output_audio.delta``, and for the carriers that chunk it, the
reply's ``done``), the caller's barge-in (``input_audio_buffer.speech_started``),
and a session ``error``, which only the log hears. Nothing goes out before the
stream started: there is no stream to speak to. How the audio and the clear are
put is each carrier's own.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from duplex import commands as c
from duplex.events import E
from gateway.outbound import Outbound
from gateway.telephony.playback import PlayedReply
from gateway.transports.codec import NOTHING, Rendered

log = logging.getLogger(__name__)

# plain strings: compared once a frame
_AUDIO_DELTA: str = E.AUDIO_DELTA.value
_AUDIO_DONE: str = E.AUDIO_DONE.value
_SPEECH_STARTED: str = E.SPEECH_STARTED.value


class CarrierRender(ABC):
    """A carrier codec's ``render``: the server events it acts on, dispatched."""

    def render(self, out: Outbound) -> Rendered:
        ev = out.event()  # as built: parsed only for a replay, read back from the journal
        if not self._streaming() or not isinstance(ev, dict):
            return NOTHING  # not started: no stream to speak to
        kind = ev.get("type")
        if kind == _AUDIO_DELTA:
            return self._audio(ev)
        if kind == _SPEECH_STARTED:
            return self._barge_in()
        if kind == _AUDIO_DONE:
            return self._audio_done(ev)
        if kind == "error":
            log.info("call %s: session error %s", self._call(), ev.get("error"))
        return NOTHING

    @abstractmethod
    def _streaming(self) -> bool:
        """The stream started: there is one to speak to."""

    @abstractmethod
    def _call(self) -> str:
        """The call, as the log names it."""

    @abstractmethod
    def _audio(self, ev: dict[str, Any]) -> Rendered:
        """A delta of reply audio, as the carrier takes it."""

    def _audio_done(self, ev: dict[str, Any]) -> Rendered:
        """The reply's audio ended: nothing to send, unless the carrier holds a tail."""
        return NOTHING

    @abstractmethod
    def _barge_in(self) -> Rendered:
        """The caller spoke: the carrier's clear and the truncate (``_cleared``)."""

    def _cleared(self, truncate: c.TruncateItem | None, reply: PlayedReply | None,
                 clear: str) -> Rendered:
        """A barge-in's answer: ``clear`` to the carrier and the truncate to the
        session, when some of our audio is still buffered there (else NOTHING)."""
        if truncate is None or reply is None:
            return NOTHING  # nothing of ours is still buffered at the carrier
        log.info("call %s: barge-in; %s heard %d of %.0f ms", self._call(),
                 reply.response_id, truncate.audio_end_ms, reply.sent_ms)
        return Rendered((clear,), truncate)
