"""End-to-end fixtures: a real gateway process on the embedded Valkey."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from client import RealtimeClient
from gateway_process import GatewayProcess, running_tone


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("gateway")) as proc:
        yield proc


@pytest.fixture
async def client(gateway: GatewayProcess) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.recv()
    assert created["type"] == "session.created"
    try:
        yield c
    finally:
        await c.close()
