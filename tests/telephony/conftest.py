"""Telephony fixtures: a real gateway process (tone plugin) on a Redis the tests can read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_process import GatewayProcess
from redis_server import RedisServer

from duplex.store import RedisSessionStore, connect
from gateway.telephony.calls import call_key

AUTH_TOKEN = "test-auth-token-0123456789abcdef"


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def _start(tmp: Path, redis: RedisServer, *extra: str) -> GatewayProcess:
    return GatewayProcess(tmp, args=["--plugin", "tone", "--output-lead-ms", "300",
                                     "--redis-url", redis.url, *extra]).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory,
            redis: RedisServer) -> Iterator[GatewayProcess]:
    proc = _start(Path(tmp_path_factory.mktemp("gw")), redis)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def signed_gateway(tmp_path_factory: pytest.TempPathFactory,
                   redis: RedisServer) -> Iterator[GatewayProcess]:
    proc = _start(Path(tmp_path_factory.mktemp("gw")), redis,
                  "--twilio-auth-token", AUTH_TOKEN)
    try:
        yield proc
    finally:
        proc.stop()


class Peek:
    """Reads what the gateway keeps in Redis: call bindings, journals, history."""

    def __init__(self, store: RedisSessionStore, url: str) -> None:
        self.store = store
        self.raw = connect(url)

    async def session_of(self, call_sid: str) -> str | None:
        value = await self.raw.get(call_key(call_sid))
        return json.loads(value)["sid"] if value else None

    async def journal(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(text) for _, text in await self.store.read_journal(sid, 0, 10000)]

    async def history(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(text) for text in await self.store.history(sid)]


@pytest.fixture
async def peek(redis: RedisServer) -> AsyncIterator[Peek]:
    store = RedisSessionStore(connect(redis.url))
    p = Peek(store, redis.url)
    try:
        yield p
    finally:
        await p.raw.aclose()
        await store.close()
