"""The session's timers: when each is due, and what it queues."""

from __future__ import annotations

import asyncio

from duplex import effects as fx
from gateway.session import runner_items as ri
from gateway.session.mailbox import Lane, Mailbox
from gateway.session.session_timers import SessionTimers


def mailbox() -> Mailbox:
    return Mailbox({Lane.URGENT: 0, Lane.CONTROL: 1, Lane.EVENTS: 1, Lane.MEDIA: 1})


async def test_the_idle_timeout_runs_from_the_end_of_playback() -> None:
    timers = SessionTimers(mailbox())
    loop = asyncio.get_running_loop()
    timers.reply_started()
    timers.reply_audio()
    started = timers.reply_audio_at
    assert started is not None
    timers.start_idle(fx.IdleTimer(1, 500, 3000.0))
    assert timers._idle is not None
    assert abs(timers._idle.when() - (started + 3.5)) < 1e-6  # played, then the timeout
    timers.reply_started()  # a reply without audio: from now
    timers.start_idle(fx.IdleTimer(2, 500, 0.0))
    assert timers._idle.when() - loop.time() <= 0.5
    timers.cancel()


async def test_an_elapsed_timer_is_queued_even_into_a_full_lane() -> None:
    box = mailbox()
    box.put(Lane.CONTROL, "a command")  # the lane is full
    timers = SessionTimers(box)
    timers._elapsed(7)
    assert [await box.get(), await box.get()] == ["a command", ri.IdleElapsed(7)]


async def test_the_lifetime_runs_from_the_open() -> None:
    timers = SessionTimers(mailbox())
    expired = asyncio.Event()
    timers.start_lifetime(0.0, 5.0, expired.set)  # opened long ago: due at once
    await asyncio.wait_for(expired.wait(), 5)
    timers.start_lifetime(None, 5.0, expired.set)  # no open time, no lifetime
    timers.start_lifetime(0.0, None, expired.set)
    timers.cancel()
