"""bump_epoch (I2): an accepted cancel bumps exactly once, however often it is retried."""

from __future__ import annotations

import asyncio

import pytest
from store_helpers import OWNER

from duplex.errors import LeaseLost, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord, StoreConflict


async def test_bump_then_retry_does_not_bump_twice(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    assert await store.bump_epoch("s1", OWNER, 1, 0) == 1
    assert await store.bump_epoch("s1", OWNER, 1, 0) == 1  # retried cancel of epoch 0
    assert await store.bump_epoch("s1", OWNER, 1, 1) == 2
    rec = await store.get("s1")
    assert rec is not None and rec.epoch == 2


async def test_concurrent_retries_bump_once(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    results = await asyncio.gather(*(store.bump_epoch("s1", OWNER, 1, 0) for _ in range(10)))
    assert results == [1] * 10


async def test_cancel_of_a_future_epoch_is_a_conflict(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    with pytest.raises(StoreConflict) as err:
        await store.bump_epoch("s1", OWNER, 1, 3)
    assert err.value.code == "epoch_ahead"
    rec = await store.get("s1")
    assert rec is not None and rec.epoch == 0


async def test_bump_is_fenced(session: SessionRecord, store: RedisSessionStore) -> None:
    with pytest.raises(LeaseLost):
        await store.bump_epoch("s1", "gw-b", 1, 0)
    with pytest.raises(LeaseLost):
        await store.bump_epoch("s1", OWNER, 2, 0)
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError):
        await store.bump_epoch("s1", OWNER, 1, 0)
    rec = await store.get("s1")
    assert rec is not None and rec.epoch == 0
