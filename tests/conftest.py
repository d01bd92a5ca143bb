"""Shared fixtures. Store tests run against a real server started per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis_server import RedisServer

from duplex.store import RedisSessionStore, connect


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisSessionStore]:
    s = RedisSessionStore(connect(redis_url))
    try:
        yield s
    finally:
        await s.close()
