"""The session room on a clock the test moves (``manual_clock.ManualClock``): reply
audio leaves when its pacing says, a cancel purges the audio still queued (I2) and
overtakes the appends queued before it (I7), a burst of appends is drained in one
wake, and the lifetime and idle timers fire when the test's clock says, not before.

Time stands still unless a test advances it, so nothing here waits on the wall
clock; a heartbeat and its ack are the sync points (the worker handles the
heartbeat after everything queued before it of its lane and above)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from client import b64, silence, tone
from harness import MemorySocket, connect, running_app
from manual_clock import ManualClock
from starlette.applications import Starlette

from duplex import commands as c
from gateway.gateway import Gateway
from gateway.session.inbox import Lane
from gateway.session.items import Delta
from gateway.session.runner import SessionRunner

FRAME = 480  # 20 ms at 24 kHz
AUDIO = "response.output_audio.delta"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def app(redis_url: str, tmp_path: Path,
              clock: ManualClock) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path, clock=clock) as pair:  # 300 ms lead
        yield pair


async def opened(app: tuple[Starlette, Gateway],
                 query: str = "") -> tuple[MemorySocket, SessionRunner]:
    s = await connect(app[0], query=query)
    sid = (await s.until("session.created"))["session"]["id"]
    return s, app[1].runners[sid]


async def sync(s: MemorySocket) -> None:
    s.send({"type": "session.heartbeat"})
    await s.until("session.heartbeat_ack")


def queue_audio(s: MemorySocket, pcm: Any) -> int:
    frames = 0
    for start in range(0, len(pcm), FRAME):
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + FRAME])})
        frames += 1
    return frames


async def media_held(runner: SessionRunner, at_least: int,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the session's inbox holds ``at_least`` reply chunks not yet due."""
    enough = asyncio.Event()
    offer = runner.inbox.offer_media

    def counting(item: Delta) -> bool:
        taken = offer(item)
        if runner.inbox.held(Lane.MEDIA) >= at_least:
            enough.set()
        return taken

    monkeypatch.setattr(runner.inbox, "offer_media", counting)
    await asyncio.wait_for(enough.wait(), 10)


def taken_items(runner: SessionRunner,
                monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, int]]:
    """What the session's machine is given from now on, each with the inbox's wakes."""
    taken: list[tuple[object, int]] = []
    take = runner.machine.take

    def recording(item: object) -> Iterator[Any]:
        taken.append((item, runner.inbox.waits))
        return take(item)

    monkeypatch.setattr(runner.machine, "take", recording)
    return taken


async def test_reply_audio_leaves_when_the_sessions_clock_says(
        app: tuple[Starlette, Gateway], clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A word is 200 ms and the lead 300 ms: words 1 and 2 leave at once, word 3
    once 100 ms have passed, word 4 at 300 ms, word 5 at 500 ms."""
    s, runner = await opened(app)
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    s.send({"type": "response.create"})
    start = clock.now()  # the reply's first word leaves now: its pacing's anchor
    await media_held(runner, 3, monkeypatch)
    for _ in range(2):
        await s.until(AUDIO)
    await sync(s)
    assert len(s.of(AUDIO)) == 2
    for words, due_ms in ((3, 100), (4, 300), (5, 500)):
        clock.advance(start + (due_ms - 1) / 1000 - clock.now())
        await sync(s)
        assert len(s.of(AUDIO)) == words - 1  # a millisecond early: held
        clock.advance(0.002)
        await s.until(AUDIO)
        await sync(s)
        assert len(s.of(AUDIO)) == words


async def test_i2_a_cancel_purges_the_reply_audio_still_queued(
        app: tuple[Starlette, Gateway], clock: ManualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, runner = await opened(app)
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    s.send({"type": "response.create"})
    await media_held(runner, 5, monkeypatch)
    await s.until(AUDIO)
    s.send({"type": "response.cancel"})
    done = await s.until("response.done")
    assert done["response"]["status"] == "cancelled"
    assert runner.inbox.held(Lane.MEDIA) == 0  # purged before the response.done went
    clock.advance(60.0)  # all of it would have been due by now
    await sync(s)
    after = s.events[s.events.index(done) + 1:]
    assert [e["type"] for e in after] == ["rate_limits.updated", "session.heartbeat_ack"]


async def test_i7_a_cancel_overtakes_the_appends_queued_before_it(
        app: tuple[Starlette, Gateway], monkeypatch: pytest.MonkeyPatch) -> None:
    s, runner = await opened(app)
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    s.send({"type": "response.create"})
    await s.until(AUDIO)
    taken = taken_items(runner, monkeypatch)
    # a parked worker takes each frame as it is read: audio queues behind one that
    # waits, here on the update's journal write
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    frames = queue_audio(s, tone(1.0))  # loud enough for the VAD to barge in
    s.send({"type": "response.cancel"})
    done = await s.until("response.done")
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    await sync(s)
    kinds = [type(item) for item, _ in taken if isinstance(item, c.Command)]
    assert kinds[:3] == [c.UpdateSession, c.CancelResponse, c.AppendAudio]  # sent last
    assert kinds.count(c.AppendAudio) == frames  # and the audio still counts


async def test_a_burst_of_appends_costs_the_worker_a_wait_per_stage_submit_not_per_frame(
        app: tuple[Starlette, Gateway], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each append is taken as it is put while the worker is parked, or with the rest
    of the burst when it resumes: the worker parks again only after an item that had
    to wait (a stage submit every 100 ms of audio, the clear's event), not per frame."""
    s, runner = await opened(app)
    s.send({"type": "session.update", "session": {"turn_detection": None}})
    await s.until("session.updated")
    taken = taken_items(runner, monkeypatch)
    before = runner.inbox.waits
    frames = queue_audio(s, silence(0.4))  # 20 frames, 4 of the plan's 100 ms units
    s.send({"type": "input_audio_buffer.clear"})
    await s.until("input_audio_buffer.cleared")
    assert len([item for item, _ in taken if isinstance(item, c.AppendAudio)]) == frames == 20
    assert runner.inbox.waits - before <= 6


async def test_the_lifetime_ends_the_session_on_the_sessions_clock(
        redis_url: str, tmp_path: Path, clock: ManualClock) -> None:
    async with running_app(redis_url, tmp_path, clock=clock, max_session_s=60.0) as pair:
        s, runner = await opened(pair, query="extensions=duplex")
        clock.advance(59.9)
        await sync(s)
        assert not runner.closed.is_set()
        clock.advance(0.2)
        expired = await s.until("session.expired")
        assert expired["reason"] == "max_duration"
        assert [e["error"]["code"] for e in s.of("error")] == ["session_expired"]
        assert await s.close_code() == 1000


async def test_the_idle_timeout_runs_from_the_end_of_playback_on_the_sessions_clock(
        redis_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """The reply's audio all leaves at once (a lead longer than it) and plays from
    its first chunk on: the timeout runs from the end of that playback."""
    async with running_app(redis_url, tmp_path, clock=clock, output_lead_ms=5000) as pair:
        s, _ = await opened(pair)
        s.send({"type": "session.update", "session": {"instructions": "words=2", "audio": {
            "input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}}})
        s.send({"type": "response.create"})
        start = clock.now()  # its first audio leaves now
        await s.until("response.done")
        played = len(s.of(AUDIO)) * 0.2  # 200 ms a word
        assert played >= 1.0
        clock.advance(start + played + 4.99 - clock.now())
        await sync(s)
        assert s.of("input_audio_buffer.timeout_triggered") == []
        clock.advance(0.02)
        timeout = await s.until("input_audio_buffer.timeout_triggered")
        assert timeout["audio_end_ms"] == 0
