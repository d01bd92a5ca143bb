"""``duplex.attach``: what each socket hears on attach, and the one rule for a
journal gap (checked before the swap or after it, the answer is the same)."""

from __future__ import annotations

import pytest

from duplex import attach as at
from duplex.errors import InvalidRequest
from duplex.journal import ReplayVerdict

SESSION = {"id": "sess_1", "object": "realtime.session"}


def attach(cursor: int | None, *, replacing: bool = False, oldest: int | None = 1,
           last: int = 10, recovery: at.Recovery | None = None) -> list[at.AttachStep]:
    return at.attach_steps(at.Attach(3, "tok", cursor, replacing, SESSION, oldest, last,
                                     recovery))


def kinds(steps: list[at.AttachStep]) -> list[str]:
    return [type(s).__name__ for s in steps]


@pytest.mark.parametrize(("cursor", "replacing", "oldest", "last", "expected"), [
    (None, False, None, 0, ["Publish"]),
    (None, True, None, 0, ["SendOld", "EndOld", "Publish"]),
    (4, False, 1, 10, ["SendNew", "Replay"]),
    (4, True, 1, 10, ["SendOld", "EndOld", "SendNew", "Replay"]),
    (10, False, None, 10, ["SendNew", "Replay"]),  # nothing after the cursor: no gap
    (4, False, 6, 10, ["SendNew", "Refuse"]),  # 5 was trimmed away
    (4, True, 6, 10, ["SendOld", "EndOld", "SendNew", "Refuse"]),
    (0, False, None, 3, ["SendNew", "Refuse"]),  # journal emptied by acks or bounds
], ids=["open", "open-replacing", "resume", "takeover", "at-the-top", "gap", "gap-replacing",
        "empty-journal"])
def test_attach_steps(cursor: int | None, replacing: bool, oldest: int | None, last: int,
                      expected: list[str]) -> None:
    assert kinds(attach(cursor, replacing=replacing, oldest=oldest, last=last)) == expected


def test_a_new_session_is_told_its_token_journaled() -> None:
    [publish] = attach(None)
    assert isinstance(publish, at.Publish)
    assert publish.event == {"type": "session.created", "session": SESSION,
                             "resume_token": "tok"}


def test_the_replaced_socket_hears_the_new_generation_then_closes_4000() -> None:
    old, end, *_ = attach(2, replacing=True)
    assert old == at.SendOld({"type": "session.replaced", "attachment_generation": 3})
    assert end == at.EndOld(4000, "session.replaced")


def test_resumed_counts_the_replay_and_says_whether_the_session_was_recovered() -> None:
    resumed, replay = attach(4, last=10)
    assert isinstance(resumed, at.SendNew) and replay == at.Replay(4)
    assert resumed.event["type"] == "session.resumed"
    assert (resumed.event["replay_count"], resumed.event["last_server_event_seq"]) == (6, 10)
    assert resumed.event["attachment_generation"] == 3
    assert resumed.event["recovered"] is False and "lost_response_id" not in resumed.event
    recovered, _ = attach(4, recovery=at.Recovery("resp_9"))
    assert isinstance(recovered, at.SendNew)
    assert (recovered.event["recovered"], recovered.event["lost_response_id"]) == (True,
                                                                                   "resp_9")


@pytest.mark.parametrize(("cursor", "oldest", "last"), [(4, 6, 10), (0, None, 3), (0, 2, 2)])
def test_a_gap_gets_one_answer_before_and_after_the_swap(cursor: int, oldest: int | None,
                                                         last: int) -> None:
    """Before the swap the handshake asks ``check_cursor``; after it, ``attach_steps``
    decides: either way ``session.resync_required`` and a normal close, and the
    session is not ended (``Refuse`` only detaches the socket)."""
    assert at.check_cursor(cursor, oldest, last).verdict is ReplayVerdict.JOURNAL_GAP
    resync, refuse = attach(cursor, oldest=oldest, last=last)
    assert resync == at.SendNew(at.resync_required(oldest, last))
    assert resync.event == {"type": "session.resync_required", "reason": "journal_gap",
                            "oldest_server_event_seq": oldest, "last_server_event_seq": last}
    assert refuse == at.Refuse(1000, "resync_required")


def test_a_cursor_ahead_of_the_journal_is_invalid_either_way() -> None:
    with pytest.raises(InvalidRequest) as before:
        at.check_cursor(11, 1, 10)
    with pytest.raises(InvalidRequest) as after:
        attach(11, last=10)
    assert before.value.code == after.value.code == "invalid_session_resume"


def test_the_lost_reply_and_the_reaped_terminal() -> None:
    done = at.lost_response_done("resp_1")
    assert done["response"]["status"] == "failed"
    assert done["response"]["status_details"]["reason"] == "server_restarted"
    terminal = at.reaped_terminal("sess_abcdefgh12345678", "idle")
    assert terminal == {"type": "session.expired", "reason": "idle",
                        "event_id": "event_12345678_expired", "server_event_seq": 0}
