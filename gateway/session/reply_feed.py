"""What a stage's visible output does to the session: the plugin's projected
deltas (``plugins.base.Delta``) fed to the core, reply audio encoded for the
wire in chunks of at most 200 ms (``gateway.session.reply_chunks``), reply text a word
a delta, and the first audio of a reply timed."""

from __future__ import annotations

import pybase64

from duplex.fence import Fence
from duplex.session import SessionCore
from gateway.metrics import Metrics
from gateway.session import runner_items as ri
from gateway.session.audio_io import AudioIO
from gateway.session.reply_chunks import reply_chunks, words
from gateway.session.session_timers import SessionTimers
from plugins import base as pb


class ReplyFeed:
    def __init__(self, core: SessionCore, io: AudioIO, output_rate: int,
                 clock: ri.ReplyClock, timers: SessionTimers, metrics: Metrics) -> None:
        self._core, self._io, self._rate = core, io, output_rate
        self._clock, self._timers, self._metrics = clock, timers, metrics

    def feed(self, item: ri.Delta) -> None:
        delta = item.delta
        match delta:
            case pb.Transcript():
                self._clock.mark("transcribe")
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
            wire = self._io.encode(pcm)
            first = self._core.response is not None and not self._core.response.ledger.marks
            if self._core.assistant_audio(fence, pybase64.b64encode_as_string(wire),
                                          1000.0 * len(pcm) / self._rate, text) and first:
                self._timers.reply_audio()  # the reply plays from here (idle timeout)
                seconds = self._clock.first_audio()
                if seconds is not None:
                    self._metrics.first_audio.observe(seconds)
