"""End-to-end fixtures: a real gateway process on the embedded Valkey."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from client import RealtimeClient
from gateway_process import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(Path(tmp_path_factory.mktemp("gateway")),
                          args=["--plugin", "tone", "--output-lead-ms", "300"]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def client(gateway: GatewayProcess) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.recv()
    assert created["type"] == "session.created"
    try:
        yield c
    finally:
        await c.close()
