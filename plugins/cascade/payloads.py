"""Payloads the cascade stages pass to each other (opaque to the orchestrator).

Stage 0 → 1: ``UserTurn``, and ``Draft`` (a guess at the turn in progress);
stage 1 → 2: ``Clause`` and ``ToolCall``; stage 2 output: ``SpokenClause``,
``ToolCall`` (passed through) and, after the last clause of a reply,
``plugins.base.EndOfResponse``.
"""

from __future__ import annotations

from dataclasses import dataclass

from plugins.base import Pcm


@dataclass(frozen=True, slots=True)
class UserTurn:
    """Stage 0 → 1: the words of one committed user turn ("" when nothing was said).
    ``unsure``: the listener scored its words too low to act on
    (``plugins.cascade.heard``): the reply asks the user to say it again."""

    turn_id: int
    item_id: str
    text: str
    respond: bool  # the thinker should answer right away
    unsure: bool = False


@dataclass(frozen=True, slots=True)
class Draft:
    """Stage 0 → 1: the words of the user's turn so far, at a pause. The thinker
    may start on a reply to them; if the turn ends with these words, that reply
    is the turn's (``plugins.base.PromptChunk.speculative``). ``warm``: words
    heard while the user still speaks, only to prefill (the turn's start is
    then in the cache when it ends). ``unsure``: as ``UserTurn``'s, so the guess
    is the reply the turn's commit asks for."""

    text: str
    warm: bool = False
    unsure: bool = False


@dataclass(frozen=True, slots=True)
class Clause:
    """Stage 1 → 2: a piece of the reply to speak; ``last`` closes the response.

    The talker speaks ``text`` as is and reports it verbatim, so the texts of a
    reply's clauses, concatenated, should be the reply (keep the separating spaces).

    ``guess``: the first clause of a guess at the reply (the thinker's, while
    the turn is still open): the talker synthesises it and holds the speech,
    which goes out only if the reply's own first clause is the same text.
    """

    turn_id: int
    text: str
    last: bool
    guess: bool = False


@dataclass(frozen=True, slots=True)
class SpokenClause:
    """Stage 2 output: speech at the talker's rate (22 050 Hz) and the words it says.

    A clause piper speaks as several sentences comes out as several of these; the
    first carries the clause's text and the rest carry "".
    """

    turn_id: int
    pcm: Pcm
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Stage 1 → 2 → session: a call the reply makes (``arguments`` a JSON text).

    It travels through the talker, behind the reply's spoken clauses and before
    the clause marked ``last``, so the session gets the reply's words, then its
    calls, then its end, in that order."""

    turn_id: int
    name: str
    arguments: str
