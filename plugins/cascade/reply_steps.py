"""The thinker's steps of a reply that the session times (``plugins.base.ReplyStep``):
its first token and its first clause, each told once.

Both thinkers (``plugins.cascade.thinker`` on llama.cpp or vLLM,
``plugins.cascade.chat_thinker`` on a model server) stream a reply as text
deltas and hand the voice whole clauses; each delta's results go through
``ReplySteps.lead``, which puts the steps they reach first ahead of them. A
step is a visible result that is not forwarded (``segment_finished`` False):
the session gets it, the talker never does.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.stages import StageResult
from plugins.base import FIRST_CLAUSE, FIRST_TOKEN, ReplyStep


class ReplySteps:
    """One reply's steps so far."""

    __slots__ = ("_clause", "_token")

    def __init__(self) -> None:
        self._token = False  # its first text came
        self._clause = False  # its first clause (or call) went to the voice

    def lead(self, turn_id: int, results: Sequence[StageResult]) -> list[StageResult]:
        """``results`` of one text delta of the reply, led by the steps the delta
        reached first: the first delta is the first token, the first delta with a
        result is the first clause."""
        steps: list[StageResult] = []
        if not self._token:
            self._token = True
            steps.append(_step(turn_id, FIRST_TOKEN))
        if results and not self._clause:
            self._clause = True
            steps.append(_step(turn_id, FIRST_CLAUSE))
        return [*steps, *results] if steps else list(results)


def _step(turn_id: int, name: str) -> StageResult:
    return StageResult(ReplyStep(turn_id, name), segment_finished=False, visible=True)
