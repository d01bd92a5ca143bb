"""A session's attachment to a WebRTC call: events on ``oai-events``, audio on tracks.

The data channel speaks the Realtime GA dialect exactly as a WebSocket does (the
same journal, ``server_event_seq`` and errors, through ``RealtimeCodec``), except
that the reply's audio goes on the speaker track instead: like OpenAI over WebRTC,
``response.output_audio.delta`` is not sent on the channel (its transcript and
every other event are). The attachment follows the session's audio formats (its
own ``session.created``/``session.updated``), and on a barge-in (the user's
``speech_started``, or the client's ``output_audio_buffer.clear`` answered with
``output_audio_buffer.cleared``) drops the unplayed reply and truncates its item
to what was played, as OpenAI does for WebRTC. When the track takes a reply's
first audio, the session has its playback mark.
"""

from __future__ import annotations

import json
from typing import Any

from duplex.commands import decode_base64_audio
from duplex.events import E
from gateway.outbound import Outbound
from gateway.transports.attachment import SocketAttachment
from gateway.transports.peer_audio import PeerAudio
from gateway.transports.speaker import Speaker

_AUDIO_DELTA: str = E.AUDIO_DELTA.value
_AUDIO_DONE: str = E.AUDIO_DONE.value
_FORMATS = frozenset({E.SESSION_CREATED.value, E.SESSION_UPDATED.value})
_BARGE_IN = frozenset({E.SPEECH_STARTED.value, E.OUTPUT_AUDIO_CLEARED.value})
_ACTS_ON = _FORMATS | _BARGE_IN | {_AUDIO_DELTA, _AUDIO_DONE}


class WebRTCAttachment(SocketAttachment):
    """``frames`` send text on the data channel; ``speaker`` feeds the track."""

    def __init__(self, *args: Any, audio: PeerAudio, speaker: Speaker, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.audio = audio
        self.speaker = speaker
        speaker.on_played = self.session.played  # the track took the reply's first audio

    async def send(self, out: Outbound) -> None:
        kind = out.type or _type_of(out.text)
        if kind not in _ACTS_ON:
            await super().send(out)
            return
        ev = out.event()
        if kind == _AUDIO_DELTA:
            self._play(ev)
            return  # on the track, not on the channel
        await super().send(out)
        if kind in _FORMATS:
            self.audio.follow(ev.get("session"))
        elif kind == _AUDIO_DONE:
            tail = self.audio.reply_ended()
            self.speaker.queue(str(ev.get("response_id")), str(ev.get("item_id")), tail)
        else:
            truncate = self.speaker.barge_in()
            self.audio.reply_ended()
            if truncate is not None:
                self.submit(truncate)

    def _play(self, ev: dict[str, Any]) -> None:
        delta = ev.get("delta")
        if not isinstance(delta, str):
            return
        pcm = self.audio.reply(decode_base64_audio(delta))
        self.speaker.queue(str(ev.get("response_id")), str(ev.get("item_id")), pcm)


def _type_of(text: str) -> str:
    """A journaled event's type (a replay's ``Outbound`` carries only its text)."""
    try:
        kind = json.loads(text).get("type")
    except (ValueError, AttributeError):
        return ""
    return kind if isinstance(kind, str) else ""
