"""Telephony fixtures: a real gateway process (tone plugin) on a Redis the tests can read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from carrier_flags import CARRIER_FLAGS
from gateway_process import GatewayProcess
from redis_server import RedisServer
from tone_gateways import serving
from twilio_helpers import AUTH_TOKEN, Peek

from duplex.store import RedisSessionStore, connect


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory,
            redis: RedisServer) -> Iterator[GatewayProcess]:
    yield from serving(Path(tmp_path_factory.mktemp("gw")), redis)


@pytest.fixture(scope="module")
def signed_gateway(tmp_path_factory: pytest.TempPathFactory,
                   redis: RedisServer) -> Iterator[GatewayProcess]:
    yield from serving(Path(tmp_path_factory.mktemp("gw")), redis,
                       "--twilio-auth-token", AUTH_TOKEN)


@pytest.fixture(scope="module")
def carrier_gateway(tmp_path_factory: pytest.TempPathFactory,
                    redis: RedisServer) -> Iterator[GatewayProcess]:
    """A gateway with the Telnyx and Plivo routes on (their credentials set)."""
    yield from serving(Path(tmp_path_factory.mktemp("gw")), redis, *CARRIER_FLAGS)


@pytest.fixture
async def peek(redis: RedisServer) -> AsyncIterator[Peek]:
    store = RedisSessionStore(connect(redis.url))
    p = Peek(store, redis.url)
    try:
        yield p
    finally:
        await p.raw.aclose()
        await store.close()
