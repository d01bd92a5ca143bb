"""What the cascade's visible stage outputs mean to a session."""

from __future__ import annotations

from plugins.base import (
    Delta,
    EndOfResponse,
    FunctionCall,
    ReplyStep,
    Speech,
    Transcript,
    WordsHeard,
)
from plugins.cascade.payloads import Draft, SpokenClause, ToolCall, UserTurn


def project(stage: int, payload: object) -> list[Delta]:
    """``UserTurn`` → ``Transcript``; a draft (not warm) → ``WordsHeard``;
    the thinker's ``ReplyStep`` as is; ``SpokenClause`` → ``Speech``;
    ``ToolCall`` → ``FunctionCall``; ``EndOfResponse`` as is. Anything else is a bug
    in the caller."""
    match stage, payload:
        case 0, UserTurn(item_id=item_id, text=text):
            return [Transcript(item_id, text)]
        case 0, Draft(text=text, warm=False):
            return [WordsHeard(text)]
        case 1, ReplyStep():
            return [payload]
        case 2, SpokenClause(turn_id=turn_id, pcm=pcm, text=text):
            return [Speech(turn_id, pcm, text)]
        case 2, ToolCall(turn_id=turn_id, name=name, arguments=arguments):
            return [FunctionCall(turn_id, name, arguments)]
        case 2, EndOfResponse():
            return [payload]
    raise TypeError(f"cascade stage {stage} has no visible output {type(payload).__name__}")
