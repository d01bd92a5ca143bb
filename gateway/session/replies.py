"""What a stage's visible output does to the session: the plugin's projected
deltas (``plugins.base.Delta``) fed to the core, reply audio encoded for the
wire in chunks of at most ``MAX_CHUNK_MS``, reply text a word a delta, and each
reply timed (``ReplyTimings``).

A talker speaks a clause at a time (two or three seconds of audio in one
piece); OpenAI's ``response.output_audio.delta`` events carry a few hundred
milliseconds each, and clients size their playback buffers and barge-in
bookkeeping by that. Each chunk carries the words spoken in it, spread over
the chunks in order, so the playback ledger can truncate a reply close to
the word the user last heard (I6).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pybase64

from duplex import commands as c
from duplex.events import ServerEvent
from duplex.fence import Fence
from duplex.session import SessionCore
from gateway import tracing
from gateway.metrics import Metrics
from gateway.session.audio import SessionAudio
from gateway.session.items import Delta
from gateway.session.turn_split import FIRST_AUDIO, TRANSCRIBE, TURN_DETECTION, TurnSplit
from plugins import base as pb

MAX_CHUNK_MS = 200
_WORD = re.compile(r"\s*\S+")


class ReplyTimings:
    """Where a reply's time went (``TurnSplit``): ``response.done`` carries it as
    ``timings_ms`` (an extension): the turn detector's wait, then from the end of
    the user's turn (or the ``response.create``) to the transcript, to each step
    a stage tells (``ReplyStep``: the thinker's first token and first clause),
    to each timed stage's first output and to the first audio.

    The steps are noted as the stages' outputs arrive (``arrived``, ``stage``),
    before the session's inbox, whose lanes need not keep the stages' order."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._start: float | None = None
        self._ms: dict[str, float] = {}
        self._detection_ms: float | None = None

    def start(self) -> None:
        self._start, self._ms, self._detection_ms = self._now(), {}, None

    def turn_detected(self, waited_ms: float) -> None:
        """The reply just started answers a turn the VAD ended ``waited_ms`` after
        its last voiced sample."""
        if self._start is not None and self._detection_ms is None:
            self._detection_ms = waited_ms

    def mark(self, name: str) -> float | None:
        """Note ``name`` now (the first time only); its seconds since the start."""
        if self._start is None:
            return None
        seconds = self._now() - self._start
        self._ms.setdefault(name, 1000 * seconds)
        return seconds

    def arrived(self, deltas: Sequence[pb.Delta]) -> list[pb.Delta]:
        """A stage's visible output, as it arrives: the steps it reaches (the
        transcript, a ``ReplyStep``) noted now; what the session acts on returned
        (a ``ReplyStep`` is only a time)."""
        kept: list[pb.Delta] = []
        for delta in deltas:
            if isinstance(delta, pb.ReplyStep):
                self.mark(delta.name)
                continue
            if isinstance(delta, pb.Transcript):
                self.mark(TRANSCRIBE)
            kept.append(delta)
        return kept

    def first_audio(self) -> TurnSplit | None:
        """The reply is heard: its split (None if not timed); the clock stops."""
        seconds = self.mark(FIRST_AUDIO)
        self._start = None
        if seconds is None:
            return None
        steps = {k: v for k, v in self._ms.items() if k != FIRST_AUDIO}
        return TurnSplit(1000 * seconds, self._detection_ms, MappingProxyType(steps))

    def stamp(self, ev: dict[str, Any]) -> dict[str, Any]:
        if ev["type"] != ServerEvent.RESPONSE_DONE or not self._ms:
            return ev
        measured = self._ms if self._detection_ms is None else {
            TURN_DETECTION: self._detection_ms, **self._ms}
        timings = {k: round(v, 1) for k, v in measured.items()}
        self._ms, self._detection_ms = {}, None
        return {**ev, "timings_ms": timings}


@dataclass(frozen=True, slots=True)
class _Playing:
    """A reply whose first audio went, until the client says it played some."""

    response_id: str
    item_id: str
    decided_at: float  # the turn's end decided, on the split's clock
    trace: object  # its turn's trace, for the playback mark's span (None: not traced)


class ReplyFeed:
    def __init__(self, core: SessionCore, audio: SessionAudio, timings: ReplyTimings,
                 metrics: Metrics, now: Callable[[], float]) -> None:
        self._core, self._audio, self._rate = core, audio, audio.output_rate
        self._timings, self._metrics, self._now = timings, metrics, now
        self.audio_at: float | None = None  # when the reply's first audio went (idle timeout)
        self._socket = tracing.UNTRACED  # the attached socket, as its turns' traces name it
        self._playing: _Playing | None = None

    def attached(self, attachment: object) -> None:
        """The session speaks through ``attachment`` from now on."""
        self._socket = tracing.socket_trace(attachment)

    def started(self) -> None:
        """A reply starts: its time counts from now."""
        self._timings.start()
        self.audio_at = None

    def feed(self, item: Delta) -> None:
        delta = item.delta
        match delta:
            case pb.Transcript():  # timed as it arrived (ReplyTimings.arrived)
                self._core.transcript(delta.item_id, delta.text)
            case pb.Speech():
                self._speak(item.fence.with_turn(delta.turn_id), delta)
            case pb.TextOnly():  # a word a delta, as OpenAI streams text
                for word in words(delta.text):
                    self._core.assistant_audio(item.fence.with_turn(delta.turn_id), "", 0.0,
                                               word)
            case pb.FunctionCall():
                self._core.function_call(item.fence.with_turn(delta.turn_id), delta.name,
                                         delta.arguments)
            case pb.EndOfResponse():
                self._core.response_end(item.fence.with_turn(delta.turn_id))

    def _speak(self, fence: Fence, speech: pb.Speech) -> None:
        for pcm, text in reply_chunks(speech.pcm, self._rate, speech.text):
            wire = self._audio.encode(pcm)
            first = self._core.response is not None and not self._core.response.ledger.marks
            if self._core.assistant_audio(fence, pybase64.b64encode_as_string(wire),
                                          1000.0 * len(pcm) / self._rate, text) and first:
                self.audio_at = at = self._now()  # the reply plays from here (idle timeout)
                split = self._timings.first_audio()
                if split is not None:
                    self._heard_first(fence, split, at)

    def _heard_first(self, fence: Fence, split: TurnSplit, at: float) -> None:
        """The reply's first audio went: its split, to the metrics and the trace;
        its playback mark is awaited."""
        self._metrics.observe_turn(split)
        response = self._core.response
        assert response is not None  # it took the audio
        trace = tracing.turn(split, tracing.TurnIds(fence.session_id, response.id,
                                                    fence.turn_id), self._socket)
        self._playing = _Playing(response.id, response.item_id,
                                 at - split.first_audio_ms / 1000, trace)

    # -- the client's playback -------------------------------------------------------

    def played(self, response_id: str | None = None, item_id: str | None = None) -> None:
        """The client has played some of the reply ``response_id`` (or of its item
        ``item_id``; neither: the reply last heard), as its transport tells it (a
        carrier's mark, the WebRTC track, a client's ``playback.ack``): the first
        time, the reply's playback mark, timed from the turn's end."""
        playing = self._playing
        if playing is None:
            return
        named = response_id is not None or item_id is not None
        if named and response_id != playing.response_id and item_id != playing.item_id:
            return  # an earlier reply's
        self._playing = None
        seconds = self._now() - playing.decided_at
        self._metrics.observe_playback_mark(seconds)
        tracing.played(playing.trace, seconds)

    def client_played(self, cmd: c.PlaybackAck | c.TruncateItem) -> None:
        """A client's own report of what it played (``playback.ack``, or the
        ``conversation.item.truncate`` of a barge-in): a mark when more than nothing."""
        match cmd:
            case c.PlaybackAck(played_ms=ms) if ms > 0:
                self.played(cmd.response_id, cmd.item_id)
            case c.TruncateItem(audio_end_ms=ms) if ms > 0:
                self.played(item_id=cmd.item_id)


def words(text: str) -> list[str]:
    """``text`` as its words, each with the white space before it (and the last
    with what trails), so they concatenate to ``text``; [text] when it has none."""
    found = _WORD.findall(text)
    if not found:
        return [text]
    found[-1] += text[sum(map(len, found)):]
    return found


def reply_chunks(pcm: pb.Pcm, rate: int, text: str,
                 max_ms: int = MAX_CHUNK_MS) -> Iterator[tuple[pb.Pcm, str]]:
    """``pcm`` in chunks of at most ``max_ms``, each with its share of ``text``
    (the shares concatenate to ``text``)."""
    step = max(1, rate * max_ms // 1000)
    count = max(1, -(-len(pcm) // step))
    spoken = words(text)
    shares = [""] * count
    for i, word in enumerate(spoken):  # a word goes with the chunk where it ends, so a
        shares[((i + 1) * count - 1) // len(spoken)] += word  # truncation keeps none unheard
    for i in range(count):
        yield pcm[i * step:(i + 1) * step], shares[i]
