"""Payloads the tone plugin's stages pass to each other (opaque to the orchestrator)."""

from __future__ import annotations

from dataclasses import dataclass

from plugins.base import Pcm


@dataclass(frozen=True, slots=True)
class Heard:
    """Stage 0 → 1: what the listener heard of one committed user turn."""

    turn_id: int
    item_id: str
    speech_ms: int  # time in 20 ms frames loud enough to count as speech
    respond: bool
    transcript: str


@dataclass(frozen=True, slots=True)
class Clause:
    """Stage 1 → 2: a few words of the reply; ``last`` closes the response."""

    turn_id: int
    text: str
    last: bool


@dataclass(frozen=True, slots=True)
class Call:
    """Stage 1 → 2 → session: a tool call, passed on by the speaker so it comes
    after the reply's words (projects to ``FunctionCall``)."""

    turn_id: int
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class SpokenWord:
    """Stage 2 output: one word and its tone (projects to ``Speech``)."""

    turn_id: int
    word: str
    pcm: Pcm
