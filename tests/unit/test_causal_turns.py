"""I9 causal turns: a response is built from every turn committed before the
``response.create`` (or VAD commit) that started it, however slow the listener.

The core's effects go through the real ``ListenThinkSpeakPlan`` into a model of
the pipeline in which each stage is a FIFO that runs whenever the schedule says
(the test draws the schedule, so the listener can lag the client by any amount,
as Whisper does). The thinker records which committed turns it has heard when
it is asked to answer. A plan that sends ``response.create`` straight to the
thinker, as the gateway once did, fails the same check.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex import commands as c
from duplex import effects as fx
from duplex.config import SessionConfig, TurnDetection
from duplex.fence import Fence
from duplex.session import SessionCore
from duplex.tools import ToolSet
from engines.stages import StageResult
from plugins.base import Capabilities, Context, HistoryItem, Pcm, Submit, history_item
from plugins.listen_think_speak import LISTEN, THINK, ListenThinkSpeakPlan, Relay
from plugins.tone.payloads import Heard
from plugins.tone.stages import ListenModel

RATE = 24000
CAPS = Capabilities("test", RATE, RATE, unit_ms=100)


class View:
    def __init__(self, core: SessionCore) -> None:
        self.core = core

    @property
    def instructions(self) -> str:
        return self.core.config.instructions

    @property
    def prefix_padding_ms(self) -> int:
        return 300

    def history(self) -> tuple[HistoryItem, ...]:
        return tuple(h for h in map(history_item, self.core.history()) if h is not None)

    @property
    def tools(self) -> ToolSet:
        return self.core.config.tools

    @property
    def auto_respond(self) -> bool:
        return False


@dataclass
class Thinker:
    """Stage 1 as the check sees it: which committed turns it heard, in order."""

    heard: list[str] = field(default_factory=list)
    answered: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    contexts: int = 0

    def step(self, payload: Any) -> None:
        match payload:
            case Context():
                self.contexts += 1
            case Heard():
                self.heard.append(payload.item_id)
                if payload.respond:
                    self.answered.append((payload.turn_id, tuple(self.heard)))
            case fx.StartResponse():
                self.answered.append((payload.fence.turn_id, tuple(self.heard)))
            case _:
                raise AssertionError(f"the thinker got {payload!r}")


class Pipeline:
    """The core, a plan, and stages 0 and 1 as FIFOs the schedule runs."""

    def __init__(self, plan: Any, *, vad: bool = False) -> None:
        td = TurnDetection() if vad else None
        self.core = SessionCore(Fence("s1", 1, 0, 0), SessionConfig(turn_detection=td))
        self.view = View(self.core)
        self.plan = plan
        self.listener = ListenModel(RATE)
        self.listen_state = self.listener.open(self.core.fence)
        self.thinker = Thinker()
        self.queues: dict[int, deque[Any]] = {LISTEN: deque(), THINK: deque()}
        self.required: dict[int, tuple[str, ...]] = {}  # response turn → turns before it
        self.committed: list[str] = []

    # -- the client ------------------------------------------------------------------

    def speak(self, ms: int) -> None:
        pcm: Pcm = np.full(RATE * ms // 1000, 8000, dtype=np.int16)
        self.core.audio_appended(float(ms))
        self._run(self.plan.audio(pcm, self.view))

    def send(self, cmd: c.Command) -> None:
        from duplex.dispatch import apply_command
        from duplex.errors import DuplexError

        try:
            apply_command(self.core, cmd)
        except DuplexError:
            self.core.effects()
            return
        self._effects()

    def end_reply(self) -> None:
        """The reply streamed to its end (what the talker's last output does)."""
        if self.core.response is not None:
            self.core.response_end(self.core.response.fence)
            self._effects()

    def vad_turn(self) -> None:
        self.core.speech_started(0)
        self._effects()
        self.speak(300)
        self.core.speech_stopped(300)
        self._effects()

    def _effects(self) -> None:
        for effect in self.core.effects():
            if isinstance(effect, fx.CommitAudio):
                self.committed.append(effect.item_id)
                if effect.respond:
                    self.required[effect.fence.turn_id] = tuple(self.committed)
            if isinstance(effect, fx.StartResponse):
                self.required[effect.fence.turn_id] = tuple(self.committed)
            if isinstance(effect, fx.PlanEffect):
                self._run(self.plan.effect(effect, self.view))

    def _run(self, submissions: Sequence[Submit]) -> None:
        for sub in submissions:
            self.queues[sub.stage].append(sub.payload)

    # -- the stages ------------------------------------------------------------------

    def tick(self, stage: int) -> None:
        """The stage handles its oldest input; stage 0's finished output moves on."""
        if not self.queues[stage]:
            return
        payload = self.queues[stage].popleft()
        if stage == THINK:
            self.thinker.step(payload)
            return
        for result in self.listener.step(self.listen_state, payload):
            assert isinstance(result, StageResult)
            if result.visible and isinstance(result.payload, Heard):
                self.core.transcript(result.payload.item_id, result.payload.transcript)
                self.core.effects()
            self.queues[THINK].append(result.payload)

    def settle(self) -> None:
        while self.queues[LISTEN] or self.queues[THINK]:
            self.tick(LISTEN if self.queues[LISTEN] else THINK)

    def check(self) -> None:
        """I9: when asked to answer turn N, the thinker had heard every turn
        committed before the response for N started."""
        for turn_id, heard in self.thinker.answered:
            missing = set(self.required[turn_id]) - set(heard)
            assert not missing, f"the reply to turn {turn_id} was built without {missing}"


class DirectPlan(ListenThinkSpeakPlan):
    """The old wiring: ``response.create`` straight to the thinker."""

    def effect(self, effect: fx.PlanEffect, view: Any) -> Sequence[Submit]:
        subs = super().effect(effect, view)
        return [Submit(THINK, s.payload.payload) if isinstance(s.payload, Relay) else s
                for s in subs]


CREATE = c.CreateResponse(None, None, None, None, False)


def push_to_talk(p: Pipeline, ms: int) -> None:
    p.speak(ms)
    p.send(c.CommitInput(None))
    p.send(CREATE)


# -- tables ----------------------------------------------------------------------


def test_push_to_talk_with_a_slow_listener() -> None:
    """Commit and response.create back to back; the thinker runs first whenever
    it can: its answer still includes the turn."""
    p = Pipeline(ListenThinkSpeakPlan(CAPS))
    push_to_talk(p, 600)
    p.tick(THINK)  # the context
    p.tick(THINK)  # nothing else has reached it yet
    assert p.thinker.answered == []
    p.settle()
    p.check()
    assert p.thinker.answered == [(1, tuple(p.committed))]


def test_the_check_catches_a_plan_that_races_the_listener() -> None:
    p = Pipeline(DirectPlan(CAPS))
    push_to_talk(p, 600)
    while p.queues[THINK]:
        p.tick(THINK)
    p.settle()
    with pytest.raises(AssertionError, match="built without"):
        p.check()


def test_two_commits_then_one_response_hear_both() -> None:
    p = Pipeline(ListenThinkSpeakPlan(CAPS))
    for ms in (300, 500):
        p.speak(ms)
        p.send(c.CommitInput(None))
    p.send(CREATE)
    p.settle()
    p.check()
    [(_, heard)] = p.thinker.answered
    assert heard == tuple(p.committed) and len(heard) == 2


def test_a_vad_commit_during_a_reply_is_heard_by_the_deferred_reply() -> None:
    p = Pipeline(ListenThinkSpeakPlan(CAPS), vad=True)
    p.vad_turn()
    p.settle()
    assert len(p.thinker.answered) == 1
    p.core.config = SessionConfig(turn_detection=TurnDetection(interrupt_response=False))
    p.vad_turn()  # while the first reply runs: deferred until it ends
    p.end_reply()
    p.settle()
    p.check()
    assert len(p.thinker.answered) == 2
    assert p.thinker.answered[1][1] == tuple(p.committed)


def test_a_text_item_and_new_instructions_reach_the_thinker_before_the_reply() -> None:
    p = Pipeline(ListenThinkSpeakPlan(CAPS))
    p.send(CREATE)  # starts the epoch's context
    p.settle()
    p.end_reply()
    p.send(c.UpdateSession(None, {"instructions": "be brief"}))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "hello"}]}
    p.send(c.CreateItem(None, item, None))
    p.send(CREATE)
    relayed = [s for s in p.queues[LISTEN] if isinstance(s, Relay)]
    assert [type(r.payload).__name__ for r in relayed] == ["Context", "Context",
                                                           "StartResponse"]
    assert relayed[0].payload == Context("be brief")
    assert relayed[1].payload == Context(None, (HistoryItem("user", "hello"),))


def test_a_barge_in_starts_the_new_epoch_with_context_and_the_speech() -> None:
    plan = ListenThinkSpeakPlan(CAPS)
    p = Pipeline(plan, vad=True)
    p.vad_turn()
    p.settle()
    p.queues[LISTEN].clear()
    p.core.speech_started(0)  # barge-in
    effects = p.core.effects()
    [abort] = [e for e in effects if isinstance(e, fx.AbortEpoch)]
    subs = plan.effect(abort, p.view)
    assert [type(s.payload).__name__ for s in subs] == ["Relay", "AudioUnit"]
    assert isinstance(subs[0].payload, Relay)
    context = subs[0].payload.payload
    assert isinstance(context, Context) and context.items[0].role == "user"
    assert all(s.stage == LISTEN for s in subs)


def test_a_failed_thinker_gets_its_context_again() -> None:
    plan = ListenThinkSpeakPlan(CAPS)
    p = Pipeline(plan)
    push_to_talk(p, 300)
    p.settle()
    assert p.thinker.contexts == 1
    plan.stage_failed(LISTEN)  # the listener's own failure leaves the thinker as it is
    p.end_reply()
    push_to_talk(p, 300)
    p.settle()
    assert p.thinker.contexts == 1
    plan.stage_failed(THINK)
    p.end_reply()
    push_to_talk(p, 300)
    p.settle()
    assert p.thinker.contexts == 2


# -- any schedule ----------------------------------------------------------------

OPS = st.sampled_from(["speak", "commit", "create", "clear", "item", "instructions",
                       "listen", "think"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(OPS, st.integers(100, 900)), max_size=60))
def test_i9_every_reply_hears_every_turn_before_it_under_any_schedule(
        script: list[tuple[str, int]]) -> None:
    p = Pipeline(ListenThinkSpeakPlan(CAPS))
    for op, ms in script:
        match op:
            case "speak":
                p.speak(ms)
            case "commit":
                p.send(c.CommitInput(None))
            case "create":
                p.end_reply()  # the last reply ends first: one at a time
                p.send(CREATE)
            case "clear":
                p.send(c.ClearInput(None))
            case "item":
                p.send(c.CreateItem(None, {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": f"note {ms}"}]}, None))
            case "instructions":
                p.send(c.UpdateSession(None, {"instructions": f"words={ms // 100}"}))
            case "listen":
                p.tick(LISTEN)
            case "think":
                p.tick(THINK)
        p.check()
    p.settle()
    p.check()
