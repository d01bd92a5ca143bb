"""Plan effects as a stage receives them, for tests that drive stages by hand."""

from __future__ import annotations

from typing import Any

from duplex import effects as fx
from duplex.events import item_text
from duplex.fence import Fence

FENCE = Fence("sess_test", incarnation=1, epoch=0, turn_id=0)


def commit(turn_id: int, item_id: str | None = None, respond: bool = True) -> fx.CommitAudio:
    """The user's turn ``turn_id`` ended (a VAD or client commit)."""
    return fx.CommitAudio(FENCE.with_turn(turn_id), item_id or f"item_{turn_id}", respond)


def start(turn_id: int, response_id: str = "resp_1",
          instructions: str | None = None) -> fx.StartResponse:
    """``response.create`` for turn ``turn_id``."""
    return fx.StartResponse(FENCE.with_turn(turn_id), response_id, instructions)


def discard() -> fx.DiscardAudio:
    return fx.DiscardAudio(FENCE)


def said(core: Any) -> list[tuple[str, str]]:
    """``(role, words)`` of each item of a core's honest history, oldest first."""
    return [(str(item.get("role")), item_text(item)) for item in core.history()]
