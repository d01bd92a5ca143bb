"""The session machine: one inbox item in, the actions it needs out. Synchronous.

It holds everything a session decides with: the sans-I/O core
(``duplex.session.SessionCore``), the session's audio (decode, resample, the
VAD: ``gateway.session.audio``), the plugin's plan (which stage hears what) and
the reply feed (what a stage's output does to the conversation). It does no I/O
and never waits; what must wait (journal and send, stage submits and aborts,
store writes, timers) it returns as actions (``gateway.session.actions``) for
the runner to carry out, in order.

An append is decoded, counted and heard by the VAD; each speech start or stop
the VAD hears is fed to the core and its effects acted on before the append's
audio goes to the plan, since a turn's end changes what the plan does with it.
The words so far of the turn in progress that a stage reports (``WordsHeard``:
the cascade's drafts) go to the VAD too, between appends: words that finish
the turn may end it then (``plugins.turn_end``).
The core's effects become actions in their order, with one exception: history
and config writes go out with the events journaled next, in one pipeline
(``Publish``), so nothing a client hears waits on such a write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from duplex import attach as at
from duplex import commands as c
from duplex import effects as fx
from duplex.dispatch import apply_command
from duplex.errors import CapacityError, SessionStateError
from duplex.events import ServerEvent, event
from duplex.fence import Fence, is_current_epoch
from duplex.session import SessionCore
from duplex.tools import ToolSet
from gateway.metrics import Metrics
from gateway.session.actions import (
    ONLY_RENEW,
    RENEW,
    RENEW_NOW,
    Abort,
    Action,
    AttachSocket,
    KeepEpoch,
    Publish,
    StartIdle,
    Submit,
    Trim,
)
from gateway.session.audio import SessionAudio
from gateway.session.clock import Clock
from gateway.session.history import SaveConfig, Write
from gateway.session.items import (
    Attach,
    ClientError,
    Close,
    Confirm,
    Delta,
    Detach,
    Failure,
    IdleElapsed,
)
from gateway.session.replies import ReplyFeed, ReplyTimings
from plugins import base as pb

DEFAULT_PREFIX_MS = 300  # speech kept for a barge-in's new epoch without server VAD
# the commands that start new work in the store: refused while it is full
NEW_WORK = (c.CreateResponse, c.CreateItem, c.UpdateSession, c.CommitInput)


def _never() -> bool:
    return False


def store_full_error() -> CapacityError:
    return CapacityError("the session store (Redis) is full: no new sessions or turns until "
                         "it has room "
                         "(a turn in progress finishes)", code="store_full")


class SessionMachine:
    def __init__(self, core: SessionCore, plugin: pb.DuplexModelPlugin, metrics: Metrics,
                 clock: Clock) -> None:
        self.core = core
        self.plan = plugin.plan()  # which stage hears what: the plugin's to say
        self._view = CoreView(core)
        self.audio = SessionAudio(plugin)
        self.audio.configure(core.config)
        self.timings = ReplyTimings(clock.now)
        self.replies = ReplyFeed(core, self.audio, self.timings, metrics, clock.now)
        self._clock = clock
        # whether the store is too full for new work (the gateway's StoreWatch.full);
        # a speech start heard while it is, and its stop, are not turns
        self.store_full = _never
        self._unheard = False

    @property
    def fence(self) -> Fence:
        return self.core.fence

    def take(self, item: Any) -> Iterable[Action]:
        """The actions ``item`` needs, in order. Carry each out before asking for the
        next: the machine reads the session as it goes (the plan hears an append's
        audio after its turn's end was acted on; a new epoch's submissions follow
        the abort of the old one's). Raises ``DuplexError`` for a command the session
        refuses (an append's at once; others' as their actions are asked for)."""
        if not isinstance(item, c.AppendAudio):
            return self._take(item)
        # An append (50 a second a session: this call, no other, and no generator
        # unless the VAD heard an edge): decoded and heard now; the lease renewal its
        # client's activity asks for (the runner's to skip while none is due), then
        # what the VAD heard, then the plan's submissions.
        pcm = self.audio.decode(item.audio)
        if not len(pcm):
            return ONLY_RENEW
        self.core.audio_appended(1000.0 * len(pcm) / self.audio.input_rate)
        heard = self.audio.hear(pcm)
        if heard:  # rarely: its effects must be acted on before the plan hears the audio
            return self._heard(pcm, heard)
        submissions = self.plan.audio(pcm, self._view)
        return (RENEW, Submit(self.core.fence, submissions)) if submissions else ONLY_RENEW

    def _take(self, item: Any) -> Iterator[Action]:
        match item:
            case c.Command():
                yield RENEW_NOW if isinstance(item, c.Heartbeat) else RENEW
                yield from self._command(item)
            case Delta(delta=pb.WordsHeard(text=words)):
                if is_current_epoch(self.core.fence, item.fence):
                    yield from self._turn_events(self.audio.hear_words(words))
            case Delta():
                self.replies.feed(item)
                yield from self._effects()
            case Failure():
                self.plan.stage_failed(item.stage)
                self.core.stage_failed(item.fence.with_turn(self.core.fence.turn_id),
                                       item.message)
                yield from self._effects()
            case IdleElapsed():
                self.core.idle_elapsed(item.token)
                yield from self._effects()
            case ClientError():
                yield Publish([event(ServerEvent.ERROR, error=item.error.to_wire())])
            case Attach():
                self.replies.attached(item.attachment)
                yield AttachSocket(item, self.core.session_object())
            case at.Recovery():
                if item.lost_response_id is not None:
                    yield Publish([at.lost_response_done(item.lost_response_id)])
            case Close() | Detach() | Confirm():
                yield item
            case _:
                raise TypeError(f"not an inbox item: {type(item).__name__}")

    def close(self, reason: str) -> Iterator[Action]:
        """The session ends: a running response is cancelled, without events (the
        terminal is the runner's to say, after stage cleanup: I5)."""
        self.core.close(reason)
        yield from self._effects()

    def lose(self) -> None:
        """Another process owns the session now (I3): stop, act on nothing more."""
        self.core.close("lease_lost")
        self.core.effects()

    def note_stage_latency(self, stage: int, seconds: float) -> None:
        """A stage's first output after an input came now (``seconds`` after the
        input): a step of the reply's split (``timings_ms``) when the plan names it,
        timed from the turn's end like every step."""
        name = self.plan.reply_timings.get(stage)
        if name is not None:
            self.timings.mark(name)

    def _command(self, cmd: c.Command) -> Iterator[Action]:
        if isinstance(cmd, c.PlaybackAck | c.TruncateItem):  # what the client played
            self.replies.client_played(cmd)
        match cmd:
            case c.AckEvents():
                yield Trim(cmd.server_event_seq)
                return
            case c.CloseSession():
                yield Close(cmd.reason)
                return
            case c.ResumeSession():
                raise SessionStateError("session.resume must be the first message",
                                        code="invalid_session_resume")
            case c.UpdateSession() if not self.store_full():
                apply_command(self.core, cmd)
                self.audio.configure(self.core.config)
            case _ if isinstance(cmd, NEW_WORK) and self.store_full():
                raise store_full_error()
            case _:
                apply_command(self.core, cmd)
        yield from self._effects()

    def _heard(self, pcm: pb.Pcm, heard: Sequence[pb.VadEvent]) -> Iterator[Action]:
        yield RENEW
        yield from self._turn_events(heard)
        submissions = self.plan.audio(pcm, self._view)
        if submissions:
            yield Submit(self.core.fence, submissions)

    def _turn_events(self, vad_events: Sequence[pb.VadEvent]) -> Iterator[Action]:
        """Speech starts and stops the VAD heard, each fed to the core and its
        effects acted on in turn."""
        for vad_event in vad_events:
            if vad_event.started and self.store_full():
                self._unheard = True
                yield Publish([event(ServerEvent.ERROR, error=store_full_error().to_wire())])
            elif self._unheard:  # the stop of a speech not heard
                self._unheard = False
            elif vad_event.started:
                self.core.speech_started(vad_event.audio_ms)
                yield from self._effects()
            else:
                self.core.speech_stopped(vad_event.audio_ms)
                yield from self._effects()  # the reply it commits starts its clock here
                self.timings.turn_detected(self.audio.waited_ms(vad_event))

    def _effects(self) -> Iterator[Action]:
        """The core's effects so far, as actions in their order, but for its history
        and config writes: those go with the events journaled next, and the events
        on either side of them in one append."""
        events: list[dict[str, Any]] = []
        writes: list[Write] = []
        aborted = False
        for effect in self.core.effects():
            if isinstance(effect, fx.Emit):
                events.append(self.timings.stamp(effect.event))
            elif isinstance(effect, fx.SaveItem | fx.ForgetItem):
                writes.append(effect)
            elif isinstance(effect, fx.SaveConfig):
                writes.append(SaveConfig(self.core.config.wire(self.core.fence.session_id)))
            else:
                if events or writes:
                    yield Publish(events, writes)
                    events, writes = [], []
                aborted = aborted or isinstance(effect, fx.AbortEpoch)
                yield from self._act(effect)
        if events or writes:
            yield Publish(events, writes)
        if aborted:  # stored by the append of the events after it, if there were any
            yield KeepEpoch(self.core.fence.epoch)

    def _act(self, effect: fx.PlanEffect | fx.IdleTimer) -> Iterator[Action]:
        match effect:
            case fx.IdleTimer():
                yield StartIdle(self._idle_due(effect), effect.token)
            case fx.AbortEpoch():
                self.audio.reset_output()  # what its filter holds is the old epoch's
                yield Abort(effect.cancelled, self.core.fence)
                if not self.core.closed:  # the new epoch starts where the plan says
                    yield from self._submit(self.plan.effect(effect, self._view))
            case _:
                if isinstance(effect, fx.StartResponse) or (
                        isinstance(effect, fx.CommitAudio) and effect.respond):
                    self.replies.started()
                yield from self._submit(self.plan.effect(effect, self._view))

    def _submit(self, submissions: Sequence[pb.Submit]) -> Iterator[Action]:
        if submissions:
            yield Submit(self.core.fence, submissions)

    def _idle_due(self, timer: fx.IdleTimer) -> float:
        """``idle_ms`` after the reply's audio has played (it plays from its first
        chunk on, at real time), or from now when it had none."""
        played = self._clock.now()
        audio_at = self.replies.audio_at
        if audio_at is not None and timer.playback_ms:
            played = max(played, audio_at + timer.playback_ms / 1000.0)
        return played + timer.idle_ms / 1000.0


class CoreView:
    """The session as its plugin's plan sees it (``plugins.base.SessionView``)."""

    __slots__ = ("_core",)

    def __init__(self, core: SessionCore) -> None:
        self._core = core

    @property
    def instructions(self) -> str:
        return self._core.config.instructions

    @property
    def prefix_padding_ms(self) -> int:
        td = self._core.config.turn_detection
        return td.prefix_padding_ms if td is not None else DEFAULT_PREFIX_MS

    def history(self) -> tuple[pb.HistoryItem, ...]:
        return tuple(h for h in map(pb.history_item, self._core.history()) if h is not None)

    @property
    def tools(self) -> ToolSet:
        return self._core.config.tools

    @property
    def auto_respond(self) -> bool:
        config = self._core.config
        td = config.turn_detection
        return td is not None and td.create_response and not config.transcribing_only
