"""The plan of a listen → think → speak cascade, shared by ``tone`` and ``cascade``.

Stage 0 listens (user audio, commits, discards), stage 1 thinks (context and
replies), stage 2 speaks what stage 1 says; the orchestrator forwards each
stage's finished segments to the next.

Causal order (I9). Everything meant for the thinker enters the pipeline at the
listener, wrapped in ``Relay``, which the listener passes on untouched: the
thinker then hears a ``response.create`` after the transcript of every turn
committed before it, however long the listener takes to transcribe, because
one request's inputs are handled in order at every stage and forwarded in
order. Sending it to the thinker directly (as the gateway once did) raced the
listener: a push-to-talk client's reply was built without the turn it had
just committed.

The plan also owns the audio framing: user audio goes to the listener in whole
units of ``unit_ms``, counted from the first sample after the last commit,
discard or barge-in, however the client sized its appends (what is left over
waits for the next append, or goes with a commit), all the whole units of one
append in one submit; and the
last ``prefix_padding_ms`` of it (at least one unit) is kept, so a barge-in's
new epoch starts with the speech that interrupted. Cut at fixed samples, a
listener that decides on its units (the cascade's drafts) decides at the same
point of the same audio whether it came as 20 ms frames or in bursts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from duplex import effects as fx
from engines.stages import StageResult
from plugins.base import AudioUnit, Capabilities, Context, Pcm, SessionView, Submit, history_item

LISTEN, THINK, SPEAK = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Relay:
    """A payload for the thinker, passed through the listener so it keeps its
    place behind the turns committed before it (I9)."""

    payload: Any


def relay(payload: Relay) -> Iterator[StageResult]:
    """What a listener yields for a ``Relay``: its payload, forwarded to stage 1."""
    yield StageResult(payload.payload, segment_finished=True, visible=False)


class ListenThinkSpeakPlan:
    """One session's plan (sans-I/O: it only decides what to submit)."""

    # the thinker tells its own steps (plugins.base.ReplyStep: first token, first clause)
    reply_timings: ClassVar[Mapping[int, str]] = MappingProxyType({SPEAK: "speak_first_output"})

    def __init__(self, capabilities: Capabilities) -> None:
        self._rate = capabilities.input_rate
        self._unit_samples = capabilities.input_rate * capabilities.unit_ms // 1000
        self._unit: list[Pcm] = []
        self._unit_len = 0
        self._prefix: deque[Pcm] = deque()
        self._prefix_len = 0
        self._context_sent = False  # the live epoch's thinker has its context

    # -- StagePlan ---------------------------------------------------------------

    def audio(self, pcm: Pcm, view: SessionView) -> Sequence[Submit]:
        self._remember(pcm, view.prefix_padding_ms)
        self._unit.append(pcm)
        self._unit_len += len(pcm)
        if self._unit_len < self._unit_samples:
            return []
        return self._flush(view, whole_units=True)

    def effect(self, effect: fx.PlanEffect, view: SessionView) -> Sequence[Submit]:
        match effect:
            case fx.CommitAudio():
                return [*self._flush(view), Submit(LISTEN, effect)]
            case fx.DiscardAudio():
                self._unit, self._unit_len = [], 0
                return [Submit(LISTEN, effect)]
            case fx.StartResponse():
                return [*self._context(view), Submit(LISTEN, Relay(effect))]
            case fx.AbortEpoch():
                return self._restart(view)
            case fx.ContextChanged():
                if not self._context_sent:
                    return []  # the epoch's first context carries it anyway
                items = tuple(h for h in map(history_item, effect.items) if h is not None)
                return [Submit(LISTEN, Relay(Context(effect.instructions, items,
                                                     effect.tools)))]
        raise TypeError(f"no plan for {type(effect).__name__}")

    def stage_failed(self, stage: int) -> None:
        if stage != LISTEN:  # a new thinker request starts from the whole context
            self._context_sent = False

    # -- helpers -----------------------------------------------------------------

    def _context(self, view: SessionView) -> list[Submit]:
        """The epoch's thinker request starts from the honest history (I6)."""
        if self._context_sent:
            return []
        self._context_sent = True
        context = Context(view.instructions, tuple(view.history()), view.tools)
        return [Submit(LISTEN, Relay(context))]

    def _flush(self, view: SessionView, *, whole_units: bool = False) -> list[Submit]:
        """The audio gathered, to the listener: with ``whole_units``, only whole
        units (the rest is kept for the next); else all of it (a commit's)."""
        if not self._unit:
            return []
        pcm = self._unit[0] if len(self._unit) == 1 else np.concatenate(self._unit)
        cut = len(pcm) - len(pcm) % self._unit_samples if whole_units else len(pcm)
        rest = pcm[cut:].copy()  # a view would keep the whole append alive
        self._unit, self._unit_len = ([rest], len(rest)) if len(rest) else ([], 0)
        return [*self._context(view), Submit(LISTEN, AudioUnit(pcm[:cut], view.auto_respond))]

    def _restart(self, view: SessionView) -> list[Submit]:
        """A new epoch: its requests start empty, so the thinker needs the context
        again and the listener the speech that barged in (the prefix holds the
        unflushed unit too)."""
        self._context_sent = False
        self._unit, self._unit_len = [], 0
        if not self._prefix:
            return []
        prefix = np.concatenate(self._prefix)
        return [*self._context(view), Submit(LISTEN, AudioUnit(prefix, view.auto_respond))]

    def _remember(self, pcm: Pcm, padding_ms: int) -> None:
        keep = max(self._rate * padding_ms // 1000, self._unit_samples)
        self._prefix.append(pcm)
        self._prefix_len += len(pcm)
        while self._prefix_len - len(self._prefix[0]) >= keep:
            self._prefix_len -= len(self._prefix.popleft())

