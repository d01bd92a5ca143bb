"""Fixtures of the store tests: an opened session and a raw client to inspect keys."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from store_helpers import open_session

from duplex.store import RedisSessionStore, SessionRecord, connect


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def session(store: RedisSessionStore) -> SessionRecord:
    return await open_session(store)
