"""The session's inbox: its lanes and their order (I7), its bounds (I8), reply media
held until due and dropped on a cancel (I2), its timers, and its one wait; on a
clock the test moves (``manual_clock.ManualClock``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from manual_clock import ManualClock

from duplex import attach as at
from duplex import commands as c
from duplex.errors import CapacityError
from duplex.events import ServerEvent
from duplex.fence import Fence
from gateway.session.inbox import Inbox, Lane
from gateway.session.items import OVERTAKE_AUDIO, Close, Delta, IdleElapsed, SessionLimits
from plugins import base as pb

RATE = 24000
LIVE = Fence("sess_t", 1, 0, 0)
LIMITS = SessionLimits(lead_ms=40, max_pending_commands=8, max_pending_events=4,
                       max_pending_audio=4)


def inbox(clock: ManualClock | None = None, **limits: float) -> Inbox:
    fields = {"lead_ms": LIMITS.lead_ms, "max_pending_commands": LIMITS.max_pending_commands,
              "max_pending_events": LIMITS.max_pending_events,
              "max_pending_audio": LIMITS.max_pending_audio, **limits}
    return Inbox("session test", SessionLimits(**fields), clock or ManualClock(),  # type: ignore[arg-type]
                 RATE)


def audio(n: int) -> c.AppendAudio:
    return c.AppendAudio(f"a{n}", b"\0\0")


def speech(ms: int, word: str, fence: Fence = LIVE) -> Delta:
    return Delta(fence, pb.Speech(1, np.zeros(RATE * ms // 1000, np.int16), word))


def word(item: object) -> str:
    assert isinstance(item, Delta) and isinstance(item.delta, pb.Speech)
    return item.delta.text


def ready_now(box: Inbox) -> list[object]:
    out = []
    while (item := box.ready()) is not None:
        out.append(item)
    return out


# -- lanes -----------------------------------------------------------------------------


def test_i7_lanes_are_served_urgent_control_events_media() -> None:
    box = inbox()
    assert box.offer_media(Delta(LIVE, pb.EndOfResponse(1)))
    box.put(Lane.EVENTS, "event")
    box.put(Lane.CONTROL, "command")
    box.put_urgent("close")
    assert ready_now(box) == ["close", "command", "event", Delta(LIVE, pb.EndOfResponse(1))]
    assert len(box) == 0


def test_i7_a_cancel_goes_ahead_of_queued_audio_and_no_further() -> None:
    box = inbox()
    commit = c.CommitInput("commit")
    create = c.CreateResponse("create", None, None, None, False)
    for item in (audio(1), commit, create, audio(2), audio(3)):
        box.put(Lane.CONTROL, item)
    cancel = c.CancelResponse("cancel", None)
    box.put_ahead(Lane.CONTROL, cancel, of=lambda i: isinstance(i, c.AppendAudio))
    # behind the commit and the response.create it may cancel, ahead of the audio
    assert ready_now(box) == [audio(1), commit, create, cancel, audio(2), audio(3)]


def test_i7_urgent_items_go_ahead_of_a_full_control_lane() -> None:
    box = inbox()
    for n in range(LIMITS.max_pending_commands):
        box.put(Lane.CONTROL, audio(n))
    with pytest.raises(CapacityError) as err:
        box.put(Lane.CONTROL, audio(99))
    assert err.value.code == "input_backpressure"
    with pytest.raises(CapacityError):  # a flood of cancels is bounded too (I8)
        box.put_ahead(Lane.CONTROL, c.CancelResponse("x", None), of=lambda i: True)
    box.put_urgent("detach")
    assert box.ready() == "detach"


def test_i8_a_full_events_lane_refuses_as_output_backpressure() -> None:
    box = inbox()
    for n in range(LIMITS.max_pending_events):
        box.put(Lane.EVENTS, n)
    with pytest.raises(CapacityError) as err:
        box.put(Lane.EVENTS, "one more")
    assert err.value.code == "output_backpressure"
    assert box.drain(Lane.EVENTS) == [0, 1, 2, 3] and len(box) == 0


def test_i7_the_commands_that_overtake_audio_do_not_depend_on_it() -> None:
    assert set(OVERTAKE_AUDIO) == {c.CancelResponse, c.ClearOutputAudio, c.CloseSession}


def test_i7_an_unrefusable_item_goes_ahead_of_audio_into_a_full_lane() -> None:
    """The client's own close: after the commands it sent before, ahead of its
    queued audio, and never refused for want of room."""
    box = inbox(max_pending_commands=3)
    digit = c.DtmfReceived("dtmf", "#", 0.0)
    for item in (digit, audio(1), audio(2)):
        box.put(Lane.CONTROL, item)
    box.put_ahead(Lane.CONTROL, "close", of=lambda i: isinstance(i, c.AppendAudio),
                  refusable=False)
    assert ready_now(box) == [digit, "close", audio(1), audio(2)]


# -- timed media -------------------------------------------------------------------------


def test_audio_leaves_in_order_no_more_than_the_lead_ahead() -> None:
    clock = ManualClock()
    box = inbox(clock)
    start = clock.now()
    for text in ("one", "two", "three", "four"):
        assert box.offer_media(speech(50, text))
    left: list[tuple[float, str]] = []
    # chunk k may leave once the k*50 ms before it, less the 40 ms lead, have played
    for k in range(4):
        due = start + max(0, k * 50 - 40) / 1000
        if due > clock.now():
            clock.advance(due - clock.now() - 0.001)
            assert box.ready() is None, k  # a millisecond early: held
            clock.advance(0.002)
        item = box.ready()
        left.append((clock.now() - start, word(item)))
    assert [w for _, w in left] == ["one", "two", "three", "four"]
    assert [round(at * 1000) for at, _ in left] == [0, 11, 61, 111]


def test_other_reply_output_waits_in_order_behind_the_audio_but_is_not_paced() -> None:
    clock = ManualClock()
    box = inbox(clock, lead_ms=0)
    box.offer_media(speech(1000, "a"))
    box.offer_media(speech(1000, "b"))
    done = Delta(LIVE, pb.EndOfResponse(1))
    box.offer_media(done)
    assert word(box.ready()) == "a"
    assert box.ready() is None  # "b" is a second away, and the end behind it
    clock.advance(1.0)
    assert word(box.ready()) == "b"
    assert box.ready() == done  # at once after it


def test_i8_it_holds_no_more_media_than_its_limit() -> None:
    box = inbox(max_pending_audio=2)
    assert box.offer_media(speech(20, "a")) and box.offer_media(speech(20, "b"))
    assert not box.offer_media(speech(20, "c"))


def test_i2_a_cancel_drops_the_old_epochs_media_and_keeps_the_new() -> None:
    clock = ManualClock()
    box = inbox(clock, lead_ms=0)
    old, new = LIVE, Fence("sess_t", 1, 1, 0)
    for text in ("old1", "old2"):
        box.offer_media(speech(1000, text, old))
    box.offer_media(Delta(old, pb.EndOfResponse(1)))
    box.offer_media(speech(20, "new", new))
    assert word(box.ready()) == "old1"
    assert box.ready() is None  # old2 waits its second
    box.drop_stale(new)
    assert word(box.ready()) == "new"  # at once: pacing starts afresh for the new epoch
    assert box.ready() is None and len(box) == 0


# -- timers ------------------------------------------------------------------------------


async def settle() -> None:
    """Let the callbacks and tasks that can run, run (no time passes)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_lifetime_ends_with_an_urgent_expiry_at_its_deadline() -> None:
    clock = ManualClock()
    box = inbox(clock)
    box.expire_at(clock.wall() + 5.0)  # the store's time: five seconds from now
    box.put(Lane.CONTROL, "a command")
    clock.advance(4.99)
    await settle()
    assert box.ready() == "a command"
    assert box.ready() is None
    clock.advance(0.02)
    await settle()
    box.put(Lane.CONTROL, "another")
    assert box.ready() == Close(at.MAX_DURATION, ServerEvent.SESSION_EXPIRED)
    assert ready_now(box) == ["another"]  # said once
    assert clock.pending == []


async def test_a_lifetime_already_over_expires_at_once() -> None:
    clock = ManualClock()
    box = inbox(clock)
    box.expire_at(clock.wall() - 60.0)  # opened long ago, before a takeover
    await settle()
    assert box.ready() == Close(at.MAX_DURATION, ServerEvent.SESSION_EXPIRED)


async def test_an_idle_timeout_goes_behind_the_queued_commands_even_into_a_full_lane() -> None:
    clock = ManualClock()
    box = inbox(clock, max_pending_commands=1)
    box.expire_at(clock.wall() + 3600.0)
    box.idle_at(clock.now() + 0.5, 1)
    box.idle_at(clock.now() + 0.7, 2)  # a newer timer replaces it
    box.put(Lane.CONTROL, "a command")  # the lane is full
    clock.advance(0.6)
    await settle()
    assert box.ready() == "a command"
    assert box.ready() is None  # the first timer is gone
    clock.advance(0.1)
    await settle()
    assert box.ready() == IdleElapsed(2)
    assert clock.pending == [pytest.approx(clock.now() + 3600.0 - 0.7)]  # the lifetime's


async def test_a_timer_that_runs_a_little_early_fires_at_its_deadline() -> None:
    clock = ManualClock()
    box = inbox(clock)
    box.idle_at(clock.now() + 0.5, 1)
    clock.fire_early()
    await settle()
    assert box.ready() is None and clock.pending == [pytest.approx(clock.now() + 0.5)]
    clock.advance(0.5)
    await settle()
    assert box.ready() == IdleElapsed(1)


# -- the one wait --------------------------------------------------------------------------


async def test_the_worker_waits_for_the_media_due_on_the_clock() -> None:
    clock = ManualClock()
    box = inbox(clock, lead_ms=0)
    box.offer_media(speech(200, "a"))
    box.offer_media(speech(200, "b"))
    assert word(await box.get()) == "a"
    getting = asyncio.create_task(box.get())
    await settle()
    assert not getting.done() and clock.pending == [pytest.approx(clock.now() + 0.2)]
    clock.advance(0.2)
    assert word(await asyncio.wait_for(getting, 5)) == "b"


async def test_a_wake_up_a_little_early_waits_again_on_a_timer_of_its_own() -> None:
    clock = ManualClock()
    box = inbox(clock, lead_ms=0)
    box.offer_media(speech(200, "a"))
    box.offer_media(speech(200, "b"))
    assert word(await box.get()) == "a"
    getting = asyncio.create_task(box.get())
    await settle()
    due = clock.pending
    clock.fire_early()
    await settle()
    assert not getting.done() and clock.pending == due  # not "b" yet, and not stuck
    clock.advance(0.2)
    assert word(await asyncio.wait_for(getting, 5)) == "b"


async def test_a_burst_queued_while_the_worker_waits_costs_one_wake_and_one_timer() -> None:
    clock = ManualClock()
    box = inbox(clock)
    box.expire_at(clock.wall() + 3600.0)
    getting = asyncio.create_task(box.get())
    await settle()
    assert not getting.done() and len(clock.pending) == 1  # the lifetime's deadline
    for n in range(5):
        box.put(Lane.CONTROL, audio(n))
    assert await asyncio.wait_for(getting, 5) == audio(0)
    assert ready_now(box) == [audio(n) for n in range(1, 5)]  # no further wait
    assert box.waits == 1
    getting = asyncio.create_task(box.get())
    await settle()
    assert len(clock.pending) == 1  # the same deadline: the same timer, not one a wait
    box.close()
    assert clock.pending == []
    getting.cancel()


async def test_a_command_put_while_the_worker_waits_on_an_empty_inbox_is_handed_to_it() -> None:
    """In the call that put it, as it is (it never sits in a lane); one put while
    something else is queued goes behind that, and the worker takes both from the
    lanes, in order, at the end of the loop's turn."""
    box = inbox()
    taken: list[object] = []

    def take(item: object) -> None:  # nothing to wait on: the worker stays parked
        taken.extend([item] if item is not None else ready_now(box))

    waiting = box.wait(take)
    box.command(audio(1))
    box.command(audio(2))
    assert taken == [audio(1), audio(2)] and len(box) == 0 and box.waits == 1
    closing = Close("bye")
    box.put_urgent(closing)
    box.command(audio(3))
    assert taken == [audio(1), audio(2)] and len(box) == 2  # queued, in lane order
    await settle()
    assert taken == [audio(1), audio(2), closing, audio(3)] and not waiting.done()
    box.close()


async def test_a_command_for_a_worker_cancelled_while_it_waited_stays_queued() -> None:
    box = inbox()
    box.wait(lambda item: pytest.fail("taken by a cancelled worker")).cancel()
    box.command(audio(1))
    assert box.ready() == audio(1)
