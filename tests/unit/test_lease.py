"""Session leases (I3): pure functions of duplex/lease.py, time always explicit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from duplex.errors import LeaseLost, SessionStateError
from duplex.lease import (
    ExpiryReason,
    Lease,
    deadline,
    detach,
    end,
    expiry,
    new_lease,
    renew,
    resume,
    take_over,
)

GRACE = 30.0
IDLE = 300.0


def lease(idle: float | None = IDLE) -> Lease:
    return new_lease("gw-a", 100.0, grace_s=GRACE, idle_ttl_s=idle)


def test_new_lease() -> None:
    le = lease()
    assert (le.owner, le.incarnation, le.generation) == ("gw-a", 1, 1)
    assert le.last_activity == 100.0
    assert le.attached and not le.terminal and le.detached_at is None


# -- renew ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "activity"),
    [(150.0, 150.0), (100.0, 100.0), (50.0, 100.0)],  # activity never goes backwards
)
def test_renew_by_owner(now: float, activity: float) -> None:
    assert renew(lease(), "gw-a", 1, now).last_activity == activity


@pytest.mark.parametrize(("owner", "incarnation"), [("gw-b", 1), ("gw-a", 2), ("gw-a", 0),
                                                    ("gw-b", 2)])
def test_renew_by_non_owner_is_lease_lost(owner: str, incarnation: int) -> None:
    le = lease()
    with pytest.raises(LeaseLost) as info:
        renew(le, owner, incarnation, 150.0)
    assert info.value.code == "lease_lost"


def test_renew_after_takeover_loses_and_new_owner_renews() -> None:
    taken = take_over(lease(), "gw-b", 200.0)
    with pytest.raises(LeaseLost):
        renew(taken, "gw-a", 1, 201.0)
    assert renew(taken, "gw-b", 2, 201.0).last_activity == 201.0


def test_terminal_refuses_renew() -> None:
    with pytest.raises(SessionStateError) as info:
        renew(end(lease()), "gw-a", 1, 150.0)
    assert info.value.code == "session_closed"


# -- detach / resume ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "detached_at"),
    [(1, 120.0), (0, None), (2, None)],  # only the serving generation can detach
)
def test_detach(generation: int, detached_at: float | None) -> None:
    assert detach(lease(), generation, 120.0).detached_at == detached_at


def test_detach_for_an_older_generation_is_a_noop() -> None:
    le = resume(detach(lease(), 1, 110.0), 1, 115.0)  # generation 2, attached
    assert le.generation == 2 and le.attached
    late = detach(le, 1, 120.0)  # the abandoned socket of generation 1 says goodbye
    assert late == le
    assert late.attached


def test_detach_twice_keeps_the_first_time() -> None:
    once = detach(lease(), 1, 120.0)
    assert detach(once, 1, 125.0).detached_at == 120.0


def test_detach_terminal_is_noop() -> None:
    ended = end(lease())
    assert detach(ended, ended.generation, 120.0) == ended


def test_resume_cas() -> None:
    detached = detach(lease(), 1, 110.0)
    resumed = resume(detached, 1, 120.0)
    assert resumed.generation == 2
    assert resumed.detached_at is None and resumed.attached
    assert resumed.last_activity == 120.0


@pytest.mark.parametrize("expected", [0, 2, 5])
def test_resume_with_stale_generation_conflicts(expected: int) -> None:
    le = lease()
    with pytest.raises(SessionStateError) as info:
        resume(le, expected, 120.0)
    assert info.value.code == "session_resume_conflict"


def test_two_racing_resumers_one_wins() -> None:
    le = detach(lease(), 1, 110.0)
    seen = le.generation
    winner = resume(le, seen, 120.0)
    with pytest.raises(SessionStateError) as info:
        resume(winner, seen, 120.1)
    assert info.value.code == "session_resume_conflict"
    assert winner.generation == seen + 1


def test_resume_terminal_is_closed() -> None:
    ended = end(lease())
    with pytest.raises(SessionStateError) as info:
        resume(ended, ended.generation, 120.0)
    assert info.value.code == "session_closed"


# -- take over / end -------------------------------------------------------------------


def test_take_over() -> None:
    le = detach(lease(), 1, 110.0)
    taken = take_over(le, "gw-b", 130.0)
    assert (taken.owner, taken.incarnation) == ("gw-b", 2)
    assert taken.generation == le.generation
    assert taken.last_activity == 130.0
    assert take_over(taken, "gw-c", 90.0).last_activity == 130.0  # never backwards
    assert take_over(taken, "gw-c", 140.0).incarnation == 3


def test_take_over_terminal_refused() -> None:
    with pytest.raises(SessionStateError):
        take_over(end(lease()), "gw-b", 130.0)


def test_end_bumps_generation_and_is_terminal() -> None:
    le = lease()
    ended = end(le)
    assert ended.terminal and not ended.attached
    assert ended.generation == le.generation + 1  # the old socket can no longer resume


# -- deadline / expiry ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "due"),
    [
        (lambda: lease(), 100.0 + IDLE),
        (lambda: renew(lease(), "gw-a", 1, 200.0), 200.0 + IDLE),
        (lambda: lease(idle=None), None),
        (lambda: detach(lease(), 1, 150.0), 150.0 + GRACE),
        (lambda: detach(lease(idle=None), 1, 150.0), 150.0 + GRACE),
        (lambda: end(lease()), None),
        (lambda: end(detach(lease(), 1, 150.0)), None),
    ],
    ids=["idle", "renewed", "no-idle-ttl", "detached", "detached-no-idle", "terminal",
         "terminal-detached"],
)
def test_deadline(make: Callable[[], Lease], due: float | None) -> None:
    assert deadline(make()) == due


@pytest.mark.parametrize(
    ("make", "now", "reason"),
    [
        (lambda: lease(), 399.9, None),
        (lambda: lease(), 400.0, ExpiryReason.IDLE_TTL),  # exactly at the deadline
        (lambda: lease(), 1e9, ExpiryReason.IDLE_TTL),
        (lambda: detach(lease(), 1, 150.0), 179.9, None),
        (lambda: detach(lease(), 1, 150.0), 180.0, ExpiryReason.DISCONNECT_GRACE),
        # grace is shorter than idle and wins even though idle would also have lapsed
        (lambda: detach(lease(), 1, 150.0), 500.0, ExpiryReason.DISCONNECT_GRACE),
        (lambda: lease(idle=None), 1e12, None),  # attached, idle_ttl None: never
        (lambda: detach(lease(idle=None), 1, 150.0), 180.0, ExpiryReason.DISCONNECT_GRACE),
        (lambda: end(lease()), 1e12, None),  # terminal never expires
        (lambda: end(detach(lease(), 1, 150.0)), 1e12, None),
        (lambda: resume(detach(lease(), 1, 150.0), 1, 170.0), 200.0, None),  # grace over
        (lambda: resume(detach(lease(), 1, 150.0), 1, 170.0), 470.0, ExpiryReason.IDLE_TTL),
    ],
)
def test_expiry(make: Callable[[], Lease], now: float, reason: ExpiryReason | None) -> None:
    assert expiry(make(), now) == reason


def test_expiry_reason_wire_values() -> None:
    assert ExpiryReason.DISCONNECT_GRACE.value == "disconnect_grace_expired"
    assert ExpiryReason.IDLE_TTL.value == "idle_ttl_expired"


def test_functions_do_not_mutate() -> None:
    le = lease()
    snapshot = replace(le)
    renew(le, "gw-a", 1, 200.0)
    detach(le, 1, 200.0)
    resume(le, 1, 200.0)
    take_over(le, "gw-b", 200.0)
    end(le)
    assert le == snapshot
