"""Writes folded into journal appends: a session that journaled lately makes no
renew round trip of its own (an idle one still renews), the journal's age and
byte bounds are kept by the appends, not by trim round trips, and a history write
does not split the events around it into two appends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from client import b64, silence, tone
from harness import MemorySocket, connect, running_app
from manual_clock import ManualClock
from starlette.applications import Starlette

from gateway.gateway import Gateway


async def input_then_sync(s: MemorySocket) -> None:
    """A command (which may renew), then one the worker answers after it."""
    s.send({"type": "input_audio_buffer.append", "audio": b64(silence(0.02))})
    s.send({"type": "input_audio_buffer.clear"})
    await s.until("input_audio_buffer.cleared")


async def test_a_journal_write_renews_the_lease_and_an_idle_session_still_renews(
        redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the sessions' clock, which the test moves: a command renews the lease only
    once ``renew_every_s`` passed since the last write that renewed it."""
    clock = ManualClock()
    async with running_app(redis_url, tmp_path, clock=clock) as (starlette, gateway):
        renewed: list[float] = []
        real = gateway.store.renew

        async def renew(session_id: str, owner: str, incarnation: int, now: float) -> None:
            renewed.append(now)
            await real(session_id, owner, incarnation, now)

        monkeypatch.setattr(gateway.store, "renew", renew)
        s = await connect(starlette)
        sid = (await s.until("session.created"))["session"]["id"]
        every = gateway.runners[sid].limits.renew_every_s
        # session.created was journaled (with the time) a moment ago: that was the renewal
        await input_then_sync(s)
        assert renewed == []
        record = await gateway.store.get(sid)
        assert record is not None and record.last_activity == clock.wall()
        clock.advance(every / 2)  # the command's renewal is not due; its event renews
        await input_then_sync(s)
        assert renewed == []
        clock.advance(every)  # nothing journaled for renew_every_s: the command renews
        await input_then_sync(s)
        assert renewed == [clock.wall()]
        record = await gateway.store.get(sid)
        assert record is not None and record.last_activity == clock.wall()
        assert s.of("error") == []


async def test_the_appends_keep_the_journal_within_its_byte_bound(
        redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bound = 1500  # session.created is some 750 bytes
    async with running_app(redis_url, tmp_path, resume_replay_max_bytes=bound) as (app, gw):
        async def no_trim(*args: Any) -> None:
            raise AssertionError("a trim round trip")

        monkeypatch.setattr(gw.store, "trim_journal", no_trim)
        s = await connect(app)
        sid = (await s.until("session.created"))["session"]["id"]
        for _ in range(20):
            await input_then_sync(s)  # one event each, some 90 bytes
        oldest, last = await gw.store.journal_bounds(sid)
        assert oldest is not None and oldest > 1
        kept = await gw.store.read_journal(sid, 0)
        assert sum(len(text) for _, text in kept) <= bound
        assert [seq for seq, _ in kept] == list(range(oldest, last + 1))
        assert last == s.events[-1]["server_event_seq"]
        assert s.of("error") == []


async def test_a_turns_history_writes_share_a_pipeline_with_its_events(
        app: tuple[Starlette, Gateway], monkeypatch: pytest.MonkeyPatch) -> None:
    """A history write neither splits the events around it into two appends nor
    waits a round trip of its own: it goes out with them, in one pipeline."""
    starlette, gateway = app
    batcher = gateway.store.batch
    writes: list[tuple[str, Any, int]] = []  # what, and the pipeline it went in
    append, save = gateway.store.append_events, gateway.store.history_append

    async def append_events(session_id: str, *args: Any, **kw: Any) -> int:
        last = await append(session_id, *args, **kw)
        writes.append(("append", [json.loads(text)["type"] for _, text in args[2]],
                       batcher.pipelines))
        return last

    async def history_append(session_id: str, owner: str, incarnation: int, item_id: str,
                             *args: Any) -> None:
        await save(session_id, owner, incarnation, item_id, *args)
        writes.append(("history", item_id, batcher.pipelines))

    monkeypatch.setattr(gateway.store, "append_events", append_events)
    monkeypatch.setattr(gateway.store, "history_append", history_append)
    s = await connect(starlette)
    await s.until("session.created")
    pcm = np.concatenate([silence(0.2), tone(0.6), silence(1.0)])
    for start in range(0, pcm.size, 480):
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + 480])})
    done = await s.until("response.done", timeout=20)
    assert s.of("error") == []

    def pipeline(kind: str) -> tuple[list[str], int]:
        return next((types, at) for what, types, at in writes
                    if what == "append" and kind in types)

    def saved_in(item_id: str) -> list[int]:
        return [at for what, item, at in writes if what == "history" and item == item_id]

    # the commit and the reply it starts: one append, in the pipeline saving the user item
    types, at = pipeline("input_audio_buffer.committed")
    assert {"input_audio_buffer.speech_stopped", "conversation.item.done",
            "response.created"} <= set(types)
    user_item = s.of("input_audio_buffer.committed")[0]["item_id"]
    assert saved_in(user_item)[0] == at
    # its transcript: saved (the item again) in the pipeline that journals the event
    _, at = pipeline("conversation.item.input_audio_transcription.completed")
    assert saved_in(user_item)[1:] == [at]
    # the reply's end: its parts and the response.done, one append, with its item saved
    types, at = pipeline("response.done")
    assert {"response.output_item.done", "response.done"} <= set(types)
    assert saved_in(done["response"]["output"][0]["id"]) == [at]
    # nothing reordered on the wire: the client saw the events in journal order
    seqs = [e["server_event_seq"] for e in s.events]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_cancels_epoch_bump_rides_in_its_response_done_append_or_is_written_alone(
        app: tuple[Starlette, Gateway], monkeypatch: pytest.MonkeyPatch) -> None:
    """I2 without a round trip of its own: the append of a cancel's ``response.done``
    raises the stored epoch; a cancel that journals nothing (a close mid-reply)
    still bumps it, once."""
    starlette, gateway = app
    bumped: list[int] = []
    bump = gateway.store.bump_epoch

    async def bump_epoch(session_id: str, owner: str, incarnation: int, cancelled: int) -> int:
        bumped.append(cancelled)
        return await bump(session_id, owner, incarnation, cancelled)

    monkeypatch.setattr(gateway.store, "bump_epoch", bump_epoch)
    s = await connect(starlette)
    sid = (await s.until("session.created"))["session"]["id"]
    runner = gateway.runners[sid]
    s.send({"type": "session.update", "session": {"instructions": "words=40"}})
    s.send({"type": "response.create"})
    await s.until("response.output_audio.delta")
    s.send({"type": "response.cancel"})
    done = await s.until("response.done")
    assert done["response"]["status"] == "cancelled"
    record = await gateway.store.get(sid)
    assert record is not None and record.epoch == runner.core.fence.epoch == 1
    assert bumped == []
    # a close while a reply runs cancels it with no event of its own to journal
    s.send({"type": "response.create"})
    await s.until("response.output_audio.delta")
    s.send({"type": "session.close"})
    await s.until("session.closed")
    record = await gateway.store.get(sid)
    assert record is not None and record.epoch == 2
    assert bumped == [1]
