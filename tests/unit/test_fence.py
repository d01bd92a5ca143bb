"""Fences (I1) and epochs (I2): pure comparisons in duplex/fence.py."""

from __future__ import annotations

import pytest

from duplex.errors import FenceError
from duplex.fence import Fence, advance, apply_cancel, is_current_epoch, is_stale, takeover

ACCEPTED = Fence("s1", 2, 3, 4)


def f(incarnation: int, epoch: int, turn: int, sid: str = "s1") -> Fence:
    return Fence(sid, incarnation, epoch, turn)


@pytest.mark.parametrize(
    ("incoming", "stale"),
    [
        (f(2, 3, 4), False),  # equal
        (f(2, 3, 5), False),  # newer turn
        (f(2, 4, 0), False),  # newer epoch beats an older turn
        (f(3, 0, 0), False),  # newer incarnation beats everything else
        (f(2, 3, 3), True),  # older turn
        (f(2, 2, 99), True),  # older epoch, even with a much newer turn
        (f(1, 99, 99), True),  # older incarnation, even with newer epoch and turn
        (f(2, 3, 4, sid="s2"), True),  # another session is always stale
        (f(9, 9, 9, sid="s2"), True),  # ... however new its rank
        (f(2, 3, 4, sid=""), True),
    ],
)
def test_is_stale(incoming: Fence, stale: bool) -> None:
    assert is_stale(ACCEPTED, incoming) is stale


@pytest.mark.parametrize(
    ("incoming", "current"),
    [
        (f(2, 3, 4), True),
        (f(2, 3, 0), True),  # any turn of the live epoch
        (f(2, 3, 9), True),
        (f(2, 2, 9), False),  # older epoch, newer turn: still dropped
        (f(2, 4, 4), False),  # a future epoch is not the live one
        (f(1, 3, 4), False),  # other incarnation
        (f(3, 3, 4), False),
        (f(2, 3, 4, sid="s2"), False),
    ],
)
def test_is_current_epoch(incoming: Fence, current: bool) -> None:
    assert is_current_epoch(ACCEPTED, incoming) is current


@pytest.mark.parametrize(
    "incoming", [f(2, 3, 4), f(2, 3, 5), f(2, 4, 0), f(3, 0, 0)]
)
def test_advance_accepts_equal_or_newer(incoming: Fence) -> None:
    new = advance(ACCEPTED, incoming)
    assert new == incoming
    assert new.rank >= ACCEPTED.rank


@pytest.mark.parametrize(
    "incoming", [f(2, 3, 3), f(2, 2, 99), f(1, 99, 99), f(2, 3, 4, sid="s2")]
)
def test_advance_refuses_stale(incoming: Fence) -> None:
    with pytest.raises(FenceError) as info:
        advance(ACCEPTED, incoming)
    assert info.value.code == "stale_fence"


def test_rank_orders_incarnation_then_epoch_then_turn() -> None:
    fences = [f(1, 0, 9), f(1, 1, 0), f(1, 1, 1), f(2, 0, 0), f(2, 0, 1)]
    assert sorted(fences, key=lambda x: x.rank) == fences
    assert f(1, 2, 3).rank == (1, 2, 3)


def test_with_turn_keeps_everything_else() -> None:
    assert ACCEPTED.with_turn(9) == Fence("s1", 2, 3, 9)
    assert ACCEPTED == Fence("s1", 2, 3, 4)  # frozen, unchanged


def test_takeover_bumps_incarnation_only() -> None:
    assert takeover(ACCEPTED) == Fence("s1", 3, 3, 4)
    assert is_stale(takeover(ACCEPTED), ACCEPTED)


@pytest.mark.parametrize(
    ("cancelled_epoch", "expected", "bumped"),
    [
        (3, f(2, 4, 4), True),  # the live epoch: bump exactly once
        (2, f(2, 3, 4), False),  # retried cancel of an already-cancelled epoch
        (0, f(2, 3, 4), False),
    ],
)
def test_apply_cancel(cancelled_epoch: int, expected: Fence, bumped: bool) -> None:
    out = apply_cancel(ACCEPTED, cancelled_epoch)
    assert out.fence == expected
    assert out.bumped is bumped


def test_i2_retried_cancel_never_bumps_twice() -> None:
    first = apply_cancel(ACCEPTED, ACCEPTED.epoch)
    retry = apply_cancel(first.fence, ACCEPTED.epoch)
    assert first.bumped and not retry.bumped
    assert retry.fence == first.fence
    assert retry.fence.epoch == ACCEPTED.epoch + 1


@pytest.mark.parametrize("future", [4, 5, 100])
def test_cancelling_a_future_epoch_raises(future: int) -> None:
    with pytest.raises(FenceError):
        apply_cancel(ACCEPTED, future)
