"""Appends taken at once (``SessionRunner._append_now``): while the session's worker
waits with nothing queued, an append is handled in the caller's callback and only
what must wait (the VAD's events, the plan's payloads) is queued for the worker.
The client must not be able to tell: the same turn, streamed with the fast path on
and off, gives the same events at the same audio times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from client import b64, silence, tone
from harness import connect, running_app

from gateway.session.session_runner import SessionRunner

FRAME_S = 0.02
ORDERED = ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
           "input_audio_buffer.committed", "response.created", "response.done")


async def one_turn(redis_url: str, data_dir: Path) -> tuple[list[dict[str, Any]], int]:
    async with running_app(redis_url, data_dir) as (app, gateway):
        s = await connect(app)
        sid = (await s.until("session.created"))["session"]["id"]
        pcm = np.concatenate([silence(0.2), tone(0.6), silence(1.0)])
        step = int(24000 * FRAME_S)
        for i, start in enumerate(range(0, pcm.size, step)):
            s.send({"type": "input_audio_buffer.append", "event_id": f"a{i}",
                    "audio": b64(pcm[start:start + step])})
        await s.until("response.done", timeout=20)
        taken = gateway.runners[sid].taken_at_once
        return [e for e in s.events if e["type"] in ORDERED], taken


def _times(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(e["type"], e.get("audio_start_ms", e.get("audio_end_ms"))) for e in events]


def _said(events: list[dict[str, Any]]) -> list[str]:
    """The reply's transcripts: the tone replies with as many words as it heard
    speech, so audio planned out of order (before the turn's commit) changes them."""
    done = events[-1]["response"]
    return [part.get("transcript", "") for item in done["output"]
            for part in item.get("content", [])]


async def test_a_turn_is_the_same_with_appends_taken_at_once_or_queued(
        redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, taken = await one_turn(redis_url, tmp_path / "fast")
    assert taken > 0  # the path under test ran
    monkeypatch.setattr(SessionRunner, "_append_now", lambda self, data: False)
    queued, none_taken = await one_turn(redis_url, tmp_path / "queued")
    assert none_taken == 0
    assert [e["type"] for e in fast] == list(ORDERED)
    assert _times(fast) == _times(queued)
    assert _said(fast) == _said(queued) and _said(fast)[0]
    assert fast[0]["audio_start_ms"] == pytest.approx(200, abs=20)
