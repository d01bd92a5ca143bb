"""``PacedAudio``: reply audio held until due, in order, bounded, and dropped on a
cancel (I2)."""

from __future__ import annotations

import asyncio

import numpy as np

from duplex.fence import Fence
from gateway.session import runner_items as ri
from gateway.session.paced_audio import PacedAudio
from plugins import base as pb

RATE = 24000
LIVE = Fence("sess_t", 1, 0, 0)


def speech(ms: int, word: str, fence: Fence = LIVE) -> ri.Delta:
    return ri.Delta(fence, pb.Speech(1, np.zeros(RATE * ms // 1000, np.int16), word))


async def test_audio_leaves_in_order_no_more_than_the_lead_ahead() -> None:
    paced = PacedAudio(lead_ms=40, limit=16, output_rate=RATE)
    loop = asyncio.get_running_loop()
    out: list[tuple[float, str]] = []
    done = asyncio.Event()

    def release(item: ri.Delta) -> None:
        assert isinstance(item.delta, pb.Speech)
        out.append((loop.time(), item.delta.text))
        if len(out) == 4:
            done.set()

    task = asyncio.create_task(paced.run(release))
    try:
        start = loop.time()
        for word in "one two three four".split():
            assert paced.offer(speech(50, word))
        await asyncio.wait_for(done.wait(), 5)
    finally:
        task.cancel()
    assert [w for _, w in out] == ["one", "two", "three", "four"]
    # chunk k may leave once the k*50 ms before it, less the 40 ms lead, have played
    for k, (at, _) in enumerate(out):
        assert at - start >= max(0, k * 50 - 40) / 1000 - 0.002, (k, at - start)


async def test_it_holds_no_more_than_its_limit() -> None:
    paced = PacedAudio(lead_ms=0, limit=2, output_rate=RATE)
    assert paced.offer(speech(20, "a")) and paced.offer(speech(20, "b"))
    assert not paced.offer(speech(20, "c"))


async def test_a_cancel_drops_the_old_epochs_audio_and_keeps_the_new() -> None:
    paced = PacedAudio(lead_ms=0, limit=16, output_rate=RATE)
    old, new = LIVE, Fence("sess_t", 1, 1, 0)
    for word in ("old1", "old2"):
        paced.offer(speech(1000, word, old))
    paced.offer(speech(20, "new", new))
    released: list[str] = []
    first = asyncio.Event()

    def release(item: ri.Delta) -> None:
        assert isinstance(item.delta, pb.Speech)
        released.append(item.delta.text)
        first.set()

    task = asyncio.create_task(paced.run(release))
    try:
        await asyncio.wait_for(first.wait(), 5)  # old1 left; old2 waits its second
        first.clear()
        paced.drop_stale(new)
        await asyncio.wait_for(first.wait(), 5)
    finally:
        task.cancel()
    assert released == ["old1", "new"]
