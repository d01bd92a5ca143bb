"""``Wakeup``: an ``asyncio.Event`` for one waiter (the inbox's worker)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.session.inbox import Wakeup


async def test_a_wait_returns_once_set_and_at_once_while_set() -> None:
    wakeup = Wakeup()
    waiter = asyncio.create_task(wakeup.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    wakeup.set()
    await asyncio.wait_for(waiter, 1)
    await asyncio.wait_for(wakeup.wait(), 1)  # still set: no wait
    wakeup.clear()
    assert not wakeup.is_set()
    again = asyncio.create_task(wakeup.wait())
    await asyncio.sleep(0)
    assert not again.done()
    again.cancel()
    with pytest.raises(asyncio.CancelledError):
        await again
    wakeup.set()  # no waiter left behind by the cancelled one
    await asyncio.wait_for(wakeup.wait(), 1)


async def test_a_second_waiter_is_a_bug() -> None:
    wakeup = Wakeup()
    first = asyncio.create_task(wakeup.wait())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one waiter"):
        await wakeup.wait()
    wakeup.set()
    await asyncio.wait_for(first, 1)
