"""Journal cursor math (I4): stream ids, replay plans, ack floors."""

from __future__ import annotations

import pytest

from duplex.errors import InvalidRequest
from duplex.journal import (
    ReplayPlan,
    ReplayVerdict,
    ack_floor,
    plan_replay,
    seq_of,
    stream_id,
)


@pytest.mark.parametrize("seq", [1, 2, 9, 10, 12345, 2**53])
def test_stream_id_round_trip(seq: int) -> None:
    sid = stream_id(seq)
    assert sid == f"{seq}-1"
    assert seq_of(sid) == seq
    assert seq_of(sid.encode()) == seq


@pytest.mark.parametrize("seq", [0, -1])
def test_stream_id_starts_at_one(seq: int) -> None:
    with pytest.raises(ValueError):
        stream_id(seq)


def test_stream_ids_grow_with_seq() -> None:
    # Redis compares IDs numerically by (ms, seq): the derived IDs must grow with seq.
    ids = [tuple(int(p) for p in stream_id(s).split("-")) for s in range(1, 50)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    ("cursor", "oldest", "last", "plan"),
    [
        # nothing journaled yet, fresh client
        (0, None, 0, ReplayPlan(ReplayVerdict.REPLAY, 1, 0)),
        # client is up to date: nothing to send, whatever is retained
        (5, None, 5, ReplayPlan(ReplayVerdict.REPLAY, 6, 5)),
        (5, 3, 5, ReplayPlan(ReplayVerdict.REPLAY, 6, 5)),
        # exact coverage: the journal still holds cursor+1
        (4, 5, 9, ReplayPlan(ReplayVerdict.REPLAY, 5, 9)),
        (4, 1, 9, ReplayPlan(ReplayVerdict.REPLAY, 5, 9)),
        (0, 1, 9, ReplayPlan(ReplayVerdict.REPLAY, 1, 9)),
        # gap: cursor+1 was trimmed away
        (4, 6, 9, ReplayPlan(ReplayVerdict.JOURNAL_GAP, 5, 9)),
        (0, 2, 9, ReplayPlan(ReplayVerdict.JOURNAL_GAP, 1, 9)),
        # empty journal but events were issued after the cursor
        (4, None, 9, ReplayPlan(ReplayVerdict.JOURNAL_GAP, 5, 9)),
    ],
)
def test_plan_replay(cursor: int, oldest: int | None, last: int, plan: ReplayPlan) -> None:
    assert plan_replay(cursor, oldest, last) == plan


@pytest.mark.parametrize(("cursor", "last"), [(10, 9), (1, 0), (-1, 5)])
def test_plan_replay_rejects_bad_cursor(cursor: int, last: int) -> None:
    with pytest.raises(InvalidRequest) as info:
        plan_replay(cursor, 1, last)
    assert info.value.code == "invalid_session_resume"


@pytest.mark.parametrize(("acked", "last", "floor"), [(0, 5, 0), (3, 5, 3), (5, 5, 5),
                                                      (9, 5, 5), (4, 0, 0)])
def test_ack_floor(acked: int, last: int, floor: int) -> None:
    assert ack_floor(acked, last) == floor


def test_ack_floor_negative() -> None:
    with pytest.raises(InvalidRequest) as info:
        ack_floor(-1, 5)
    assert info.value.code == "invalid_event_ack"
