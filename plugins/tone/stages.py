"""The three stage models. They hold no state themselves (one instance serves
every session, on any worker thread); each request's state is what ``open``
returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import NO_TOOLS, ToolSet
from engines.stages import StageResult
from plugins.base import (
    FIRST_CLAUSE,
    FIRST_TOKEN,
    AudioUnit,
    Context,
    EndOfResponse,
    HistoryItem,
    Pcm,
    ReplyStep,
    history_item,
)
from plugins.listen_think_speak import Relay, relay
from plugins.tone import calls, reply
from plugins.tone.levels import Framer, frame_len, frame_powers, mean_square, threshold_dbfs
from plugins.tone.payloads import Call, Clause, Heard, SpokenWord
from plugins.tone.synth import word_tone

# The listener counts speech at the VAD's default level.
SPEECH_POWER = mean_square(threshold_dbfs(0.5))


def _unexpected(stage: str, payload: object) -> TypeError:
    return TypeError(f"tone {stage} stage cannot take {type(payload).__name__}")


# -- stage 0: listen -------------------------------------------------------------


@dataclass(slots=True)
class ListenState:
    framer: Framer
    speech_samples: int = 0


class ListenModel:
    def __init__(self, rate: int) -> None:
        self.rate = rate

    def open(self, fence: Fence) -> ListenState:
        return ListenState(Framer(frame_len(self.rate)))

    def step(self, state: ListenState, payload: object) -> Iterator[StageResult]:
        if isinstance(payload, AudioUnit):
            self._count(state, state.framer.push(payload.pcm))
        elif isinstance(payload, fx.CommitAudio):
            yield StageResult(self._commit(state, payload), segment_finished=True, visible=True)
        elif isinstance(payload, fx.DiscardAudio):
            state.framer.clear()
            state.speech_samples = 0
        elif isinstance(payload, Relay):
            yield from relay(payload)
        else:
            raise _unexpected("listen", payload)

    def close(self, state: ListenState) -> None:
        state.framer.clear()

    def _count(self, state: ListenState, frames: Pcm) -> None:
        loud = frame_powers(frames) >= SPEECH_POWER
        state.speech_samples += int(np.count_nonzero(loud)) * frames.shape[-1]

    def _commit(self, state: ListenState, turn: fx.CommitAudio) -> Heard:
        # A trailing partial frame still counts, judged on its own.
        tail = state.framer.pending
        if tail.size:
            self._count(state, tail.reshape(1, -1))
        speech_ms = state.speech_samples * 1000 // self.rate
        state.framer.clear()
        state.speech_samples = 0
        turn_id = turn.fence.turn_id
        return Heard(turn_id, turn.item_id, speech_ms, turn.respond,
                     reply.transcript(turn_id, speech_ms))


# -- stage 1: think --------------------------------------------------------------


@dataclass(slots=True)
class ThinkState:
    instructions: str = ""
    history: tuple[HistoryItem, ...] = ()
    heard: Heard | None = None  # the latest user turn
    tools: ToolSet = NO_TOOLS  # the session's
    output: str | None = None  # a tool's output the next reply answers


class ThinkModel:
    def open(self, fence: Fence) -> ThinkState:
        return ThinkState()

    def step(self, state: ThinkState, payload: object) -> Iterator[StageResult]:
        if isinstance(payload, Context):
            if payload.instructions is not None:
                state.instructions = payload.instructions
            if payload.tools is not None:
                state.tools = payload.tools
            state.history += payload.items  # a later Context adds to the history
            unanswered = _unanswered(payload.items)
            if unanswered is not None:
                state.output = unanswered
        elif isinstance(payload, Heard):
            state.heard, state.output = payload, None
            if payload.respond:
                yield from _reply(state, payload.turn_id, state.instructions, state.tools)
        elif isinstance(payload, fx.StartResponse):
            instructions = state.instructions if payload.instructions is None \
                else payload.instructions
            tools = state.tools if payload.tools is None else payload.tools
            if payload.input is not None:  # its own context, not the conversation
                yield from _reply_to(payload.fence.turn_id, payload.input, instructions, tools)
            else:
                yield from _reply(state, payload.fence.turn_id, instructions, tools)
        else:
            raise _unexpected("think", payload)

    def close(self, state: ThinkState) -> None:
        state.heard = None


def _unanswered(items: tuple[HistoryItem, ...]) -> str | None:
    """A tool's output that ends ``items``: the next reply answers it."""
    last = items[-1] if items else None
    return last.text if last is not None and last.kind == "function_call_output" else None


def _reply(state: ThinkState, turn_id: int, instructions: str, tools: ToolSet,
           about: str | None = None) -> Iterator[StageResult]:
    """Calls (``plugins.tone.calls``), or words: the tool's output when one
    came since the user spoke, else ``about`` the words given, else the counted
    reply."""
    for step in (FIRST_TOKEN, FIRST_CLAUSE):  # a reply is whole at once: both steps now
        yield StageResult(ReplyStep(turn_id, step), segment_finished=False, visible=True)
    output, state.output = state.output, None
    if output is not None:
        yield from _say(turn_id, calls.said_output(output).split())
        return
    chosen = calls.chosen_tools(tools, instructions)
    for tool in chosen:
        yield StageResult(Call(turn_id, tool.name, calls.sample_arguments(tool)),
                          segment_finished=True, visible=False)
    if chosen:
        yield StageResult(Clause(turn_id, "", last=True), segment_finished=True, visible=False)
        return
    if about:
        yield from _say(turn_id, ["about", *about.split()])
        return
    speech_ms = state.heard.speech_ms if state.heard else 0
    yield from _say(turn_id, reply.reply_words(turn_id, reply.word_count(speech_ms,
                                                                          instructions)))


def _reply_to(turn_id: int, given: tuple[dict[str, object], ...], instructions: str,
              tools: ToolSet) -> Iterator[StageResult]:
    """A reply from ``response.input`` alone: as ``_reply``, but about the last
    item with words ("about …") instead of counting."""
    items = tuple(h for h in map(history_item, given) if h is not None)
    context = ThinkState(instructions, items, tools=tools, output=_unanswered(items))
    spoken = [h.text for h in items if h.kind == "message" and h.text]
    yield from _reply(context, turn_id, instructions, tools, spoken[-1] if spoken else None)


def _say(turn_id: int, words: list[str]) -> Iterator[StageResult]:
    """The reply, one clause at a time, as a streaming thinker would emit it."""
    parts = reply.clauses(words)
    for i, text in enumerate(parts):
        clause = Clause(turn_id, text, last=i == len(parts) - 1)
        yield StageResult(clause, segment_finished=True, visible=False)


# -- stage 2: speak --------------------------------------------------------------


class SpeakModel:
    def __init__(self, rate: int) -> None:
        self.rate = rate

    def open(self, fence: Fence) -> None:
        return None  # each clause is spoken on its own

    def step(self, state: None, payload: object) -> Iterator[StageResult]:
        if isinstance(payload, Call):  # in order: after the words before it
            yield StageResult(payload, segment_finished=True, visible=True)
            return
        if not isinstance(payload, Clause):
            raise _unexpected("speak", payload)
        pcm = word_tone(payload.turn_id, self.rate)
        for word in payload.text.split():
            yield StageResult(SpokenWord(payload.turn_id, word, pcm),
                              segment_finished=True, visible=True)
        if payload.last:
            yield StageResult(EndOfResponse(payload.turn_id), segment_finished=True, visible=True)

    def close(self, state: None) -> None:
        return None
