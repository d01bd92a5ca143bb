"""A session leaves no reference cycles: what it held is freed when it lets go,
not at the next full collection, which a served gateway makes rare
(``gateway.heap.FULL_AFTER``). Issue 27's soak found the heap a sawtooth up to
234 MiB: every refused frame left its text and the reader's frames in a cycle
(the report's traceback), and every ended session its whole state (the core,
the journal, the outbox and its socket, each referring back to its holder).

Each case runs with the collector off, then counts what a collection finds
unreachable, for a small and a larger N: before the fixes that was about 7
objects per hostile frame, 100 per turn and 140 per session, so a bound that
holds for both N says the garbage does not grow with them.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from client import b64, silence, tone
from harness import MemorySocket, connect, running_app
from hostile import REGRESSIONS, Hostile
from starlette.applications import Starlette

from duplex.store import RedisSessionStore

FRAME = 480  # 20 ms at 24 kHz
BOUND = 30  # unreachable objects a run may leave, whatever its N: asyncio's, the loop's


async def _cyclic_garbage(run: Callable[[], Awaitable[None]]) -> tuple[int, Counter[str]]:
    """Objects ``run`` left unreachable (only a collection frees them), by type."""
    gc.collect()
    gc.disable()
    try:
        await run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        found = gc.collect()
        kinds = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return found, kinds


async def _opened(app: Starlette) -> MemorySocket:
    s = await connect(app)
    await s.until("session.created")
    return s


async def _closed(s: MemorySocket) -> None:
    s.send({"type": "session.close"})
    assert await s.close_code() == 1000


async def hostile_frames(app: Starlette, n: int) -> None:
    """The regressions, then ``n`` random hostile frames, each answered by its error."""
    s = await _opened(app)
    hostile = Hostile(n)
    for frame in [text for text, _ in REGRESSIONS.values()] + [hostile.message()
                                                                for _ in range(n)]:
        key = "bytes" if isinstance(frame, bytes) else "text"
        s._to_app.put_nowait({"type": "websocket.receive", key: frame})
        await s.until("error")
    await _closed(s)


async def turns(app: Starlette, n: int) -> None:
    """``n`` spoken turns, each heard out to its ``response.done``."""
    s = await _opened(app)
    s.send({"type": "session.update", "session": {"instructions": "words=1", "audio": {
        "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}}})
    await s.until("session.updated")
    pcm = np.concatenate([tone(0.5), silence(0.6)])
    for _ in range(n):
        for start in range(0, len(pcm), FRAME):
            s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + FRAME])})
        await s.until("response.done", 30)
    await _closed(s)


async def sessions(app: Starlette, n: int) -> None:
    """``n`` sessions opened and closed, by ``session.close`` and by a 1000 close."""
    for i in range(n):
        s = await _opened(app)
        if i % 2:
            await _closed(s)
        else:
            s.drop(1000)
            await s.task


async def resumes(app: Starlette, n: int) -> None:
    """One session, its socket dropped (no close frame) and resumed ``n`` times."""
    s = await connect(app)
    created = await s.until("session.created")
    sid, token = created["session"]["id"], created["resume_token"]
    for _ in range(n):
        seq = max(e.get("server_event_seq", 0) for e in s.events)
        s.drop(1006)
        await s.task
        s = await connect(app, query=f"resume={sid}")
        s.send({"type": "session.resume", "resume_token": token,
                "last_received_server_event_seq": seq})
        token = (await s.until("session.resumed"))["resume_token"]
    await _closed(s)


@pytest.mark.parametrize(("case", "small", "large"), [
    (hostile_frames, 20, 200), (turns, 1, 3), (sessions, 2, 8), (resumes, 2, 8)])
async def test_a_session_leaves_no_cycles(
        case: Callable[[Starlette, int], Awaitable[None]], small: int, large: int,
        redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def memory(self: RedisSessionStore) -> tuple[int, int]:
        # redis-py parses INFO with a closure that refers to itself: a cycle a
        # call, not ours (the store watch asks every second, an admission too)
        return 0, 0

    monkeypatch.setattr(RedisSessionStore, "memory", memory)
    async with running_app(redis_url, tmp_path) as (app, _):
        await case(app, 2)  # first uses (imports, pools, scripts loaded) are not garbage
        for n in (small, large):
            found, kinds = await _cyclic_garbage(lambda n=n: case(app, n))
            assert found <= BOUND, f"N={n}: {found} unreachable: {kinds.most_common(12)}"
