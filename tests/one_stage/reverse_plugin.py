"""A one-stage plugin, to prove the gateway knows no stage shape (issue: stage
plans owned by plugins).

One stage listens, "thinks" and speaks: each committed turn is answered with
that turn's audio played backwards, streamed in 100 ms chunks. Each chunk's
words are ``c1 c2 …``, so a transcript truncated to what was heard is
recognisable. The gateway loads it like any plugin: ``--plugin
tests.one_stage.reverse_plugin:ReversePlugin``; nothing in ``gateway/`` or
``orchestrator/`` knows it exists.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from duplex import effects as fx
from duplex.config import TurnDetection
from duplex.fence import Fence
from engines.stages import InProcessStage, Stage, StageResult
from plugins.base import (
    AudioUnit,
    Capabilities,
    Delta,
    EndOfResponse,
    Pcm,
    PluginStatus,
    Progress,
    SessionView,
    Speech,
    StagePlan,
    Submit,
    Transcript,
    VoiceActivityDetector,
)
from plugins.tone.vad import EnergyVad

RATE = 24000
CHUNK = RATE // 10  # 100 ms


@dataclass(frozen=True, slots=True)
class Heard:
    item_id: str
    samples: int


@dataclass(frozen=True, slots=True)
class Chunk:
    turn_id: int
    pcm: Pcm
    text: str


@dataclass(slots=True)
class EchoState:
    pending: list[Pcm] = field(default_factory=list)
    last_turn: Pcm = field(default_factory=lambda: np.zeros(0, np.int16))


class ReverseModel:
    """The only stage: it hears, answers and speaks."""

    def open(self, fence: Fence) -> EchoState:
        return EchoState()

    def step(self, state: EchoState, payload: object) -> Iterator[StageResult]:
        match payload:
            case AudioUnit(pcm=pcm):
                state.pending.append(pcm)
            case fx.DiscardAudio():
                state.pending.clear()
            case fx.CommitAudio(fence=fence, item_id=item_id, respond=respond):
                pcm = (np.concatenate(state.pending) if state.pending
                       else np.zeros(0, np.int16))
                state.pending.clear()
                state.last_turn = pcm
                yield StageResult(Heard(item_id, len(pcm)), visible=True)
                if respond:
                    yield from self._answer(state, fence.turn_id)
            case fx.StartResponse(fence=fence):
                yield from self._answer(state, fence.turn_id)
            case _:
                raise TypeError(f"reverse stage cannot take {type(payload).__name__}")

    def _answer(self, state: EchoState, turn_id: int) -> Iterator[StageResult]:
        backwards = state.last_turn[::-1].copy()
        for n, start in enumerate(range(0, len(backwards), CHUNK), 1):
            yield StageResult(Chunk(turn_id, backwards[start:start + CHUNK], f"c{n} "),
                              visible=True)
        yield StageResult(EndOfResponse(turn_id), visible=True)

    def close(self, state: EchoState) -> None:
        state.pending.clear()


class ReversePlan:
    """Everything goes to the one stage, in order: causal by construction (I9)."""

    reply_timings: ClassVar[Mapping[int, str]] = MappingProxyType({0: "echo_first_output"})

    def audio(self, pcm: Pcm, view: SessionView) -> Sequence[Submit]:
        return [Submit(0, AudioUnit(pcm))]

    def effect(self, effect: fx.PlanEffect, view: SessionView) -> Sequence[Submit]:
        if isinstance(effect, fx.CommitAudio | fx.DiscardAudio | fx.StartResponse):
            return [Submit(0, effect)]
        return []  # a new epoch starts empty; there is no context to keep

    def stage_failed(self, stage: int) -> None:
        return None


class ReversePlugin:
    def __init__(self) -> None:
        self.capabilities = Capabilities("reverse", RATE, RATE, unit_ms=100,
                                         stage_names=("echo",))
        self.status = PluginStatus()

    def load(self, progress: Progress) -> None:
        progress("reverse: ready")
        self.status = PluginStatus(ready=True, detail="ready")

    def stages(self) -> Sequence[Stage]:
        return [InProcessStage("echo", ReverseModel())]

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector:
        return EnergyVad(turn_detection, rate=RATE)

    def plan(self) -> StagePlan:
        return ReversePlan()

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        match payload:
            case Heard(item_id=item_id, samples=samples):
                return [Transcript(item_id, f"{samples * 1000 // RATE} ms backwards")]
            case Chunk(turn_id=turn_id, pcm=pcm, text=text):
                return [Speech(turn_id, pcm, text)]
            case EndOfResponse():
                return [payload]
        raise TypeError(f"reverse stage has no visible output {type(payload).__name__}")
