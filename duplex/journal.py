"""Journal cursor math (invariant I4).

Each server event of a session gets ``server_event_seq`` 1, 2, 3, … with no gaps
and is appended to a Redis stream under the explicit ID ``<seq>-1``. Because the
ID derives from the seq, a retried append of the same event is rejected by the
stream (IDs must grow) instead of being stored twice.

A client resuming with cursor ``n`` must get exactly ``n+1, n+2, …``; that is only
possible while the journal still holds ``n+1`` (or nothing was journaled after
``n``). Otherwise it must start over (``session.resync_required``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from duplex.errors import InvalidRequest


def stream_id(seq: int) -> str:
    if seq < 1:
        raise ValueError(f"server_event_seq starts at 1, got {seq}")
    return f"{seq}-1"


def seq_of(entry_id: str | bytes) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, _ = text.partition("-")
    return int(ms)


class ReplayVerdict(enum.StrEnum):
    REPLAY = "replay"
    JOURNAL_GAP = "journal_gap"


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    verdict: ReplayVerdict
    first_seq: int  # first seq to send (cursor + 1)
    last_seq: int  # last seq journaled so far


def plan_replay(cursor: int, oldest_retained: int | None, last_seq: int) -> ReplayPlan:
    """Decide whether events after ``cursor`` can be replayed exactly.

    ``oldest_retained`` is the smallest seq still in the journal (``None`` when
    empty); ``last_seq`` is the last seq ever issued.
    """
    if cursor < 0:
        raise InvalidRequest("last_received_server_event_seq must be >= 0",
                             code="invalid_session_resume")
    if cursor > last_seq:
        raise InvalidRequest(
            f"cursor {cursor} is ahead of the last event {last_seq}",
            code="invalid_session_resume",
        )
    first = cursor + 1
    if first > last_seq:
        return ReplayPlan(ReplayVerdict.REPLAY, first, last_seq)
    if oldest_retained is None or oldest_retained > first:
        return ReplayPlan(ReplayVerdict.JOURNAL_GAP, first, last_seq)
    return ReplayPlan(ReplayVerdict.REPLAY, first, last_seq)


def ack_floor(acked: int, last_seq: int) -> int:
    """The seq up to which a ``session.event_ack`` may trim (never past the last)."""
    if acked < 0:
        raise InvalidRequest("server_event_seq must be >= 0", code="invalid_event_ack")
    return min(acked, last_seq)
