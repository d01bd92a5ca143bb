"""I7 control beats media: the session mailbox's lanes and their order."""

from __future__ import annotations

import pytest

from duplex import commands as c
from duplex.errors import CapacityError
from gateway.session.mailbox import Lane, Mailbox
from gateway.session.runner_items import OVERTAKE_AUDIO

LIMITS = {Lane.URGENT: 0, Lane.CONTROL: 8, Lane.EVENTS: 4, Lane.MEDIA: 4}


def audio(n: int) -> c.AppendAudio:
    return c.AppendAudio(f"a{n}", b"\0\0")


async def drain(box: Mailbox) -> list[object]:
    out = []
    while len(box):
        out.append(await box.get())
    return out


async def test_i7_lanes_are_served_urgent_control_events_media() -> None:
    box = Mailbox(LIMITS)
    box.put(Lane.MEDIA, "media")
    box.put(Lane.EVENTS, "event")
    box.put(Lane.CONTROL, "command")
    box.put_urgent("close")
    assert await drain(box) == ["close", "command", "event", "media"]


async def test_i7_a_cancel_goes_ahead_of_queued_audio_and_no_further() -> None:
    box = Mailbox(LIMITS)
    commit = c.CommitInput("commit")
    create = c.CreateResponse("create", None, None, None, False)
    for item in (audio(1), commit, create, audio(2), audio(3)):
        box.put(Lane.CONTROL, item)
    cancel = c.CancelResponse("cancel", None)
    box.put_ahead(Lane.CONTROL, cancel, of=lambda i: isinstance(i, c.AppendAudio))
    # behind the commit and the response.create it may cancel, ahead of the audio
    assert await drain(box) == [audio(1), commit, create, cancel, audio(2), audio(3)]


async def test_i7_urgent_items_go_ahead_of_a_full_control_lane() -> None:
    box = Mailbox(LIMITS)
    for n in range(LIMITS[Lane.CONTROL]):
        box.put(Lane.CONTROL, audio(n))
    with pytest.raises(CapacityError) as err:
        box.put(Lane.CONTROL, audio(99))
    assert err.value.code == "input_backpressure"
    with pytest.raises(CapacityError):  # a flood of cancels is bounded too (I8)
        box.put_ahead(Lane.CONTROL, c.CancelResponse("x", None), of=lambda i: True)
    box.put_urgent("detach")
    assert await box.get() == "detach"


def test_i7_the_commands_that_overtake_audio_do_not_depend_on_it() -> None:
    assert set(OVERTAKE_AUDIO) == {c.CancelResponse, c.ClearOutputAudio, c.CloseSession}


async def test_purge_keeps_what_it_is_told_to() -> None:
    box = Mailbox(LIMITS)
    for n in range(4):
        box.put(Lane.MEDIA, n)
    assert box.purge(Lane.MEDIA, lambda n: n % 2 == 0) == 2
    assert await drain(box) == [0, 2]


def test_reply_clock_times_from_the_turns_end_and_stamps_response_done() -> None:
    from gateway.session.runner_items import ReplyClock

    now = [100.0]
    clock = ReplyClock(lambda: now[0])
    assert clock.mark("transcribe") is None  # not started: nothing is timed
    clock.start()
    now[0] = 100.25
    assert clock.mark("transcribe") == 0.25
    clock.stage("think_first_output", 0.1)
    now[0] = 100.5
    assert clock.first_audio() == 0.5
    assert clock.mark("late") is None  # stopped at the first audio
    done = clock.stamp({"type": "response.done", "response": {}})
    assert done["timings_ms"] == {"transcribe": 250.0, "think_first_output": 100.0,
                                  "first_audio": 500.0}
    assert "timings_ms" not in clock.stamp({"type": "response.done"})  # said once
    assert clock.stamp({"type": "error"}) == {"type": "error"}


async def test_i7_an_unrefusable_item_goes_ahead_of_audio_into_a_full_lane() -> None:
    """The client's own close: after the commands it sent before, ahead of its
    queued audio, and never refused for want of room."""
    box = Mailbox({**LIMITS, Lane.CONTROL: 3})
    digit = c.DtmfReceived("dtmf", "#", 0.0)
    for item in (digit, audio(1), audio(2)):
        box.put(Lane.CONTROL, item)
    box.put_ahead(Lane.CONTROL, "close", of=lambda i: isinstance(i, c.AppendAudio),
                  refusable=False)
    assert await drain(box) == [digit, "close", audio(1), audio(2)]
