"""A real 3-primary/3-replica Valkey Cluster (``tests/valkey_cluster.py``), one per
test module, and gateway processes on it (as in tests/faults)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
_FAULTS = str(Path(__file__).resolve().parent.parent / "faults")
_TELEPHONY = str(Path(__file__).resolve().parent.parent / "telephony")
for _path in (_E2E, _FAULTS, _TELEPHONY):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from fault_helpers import GatewayFactory, gateway_factory  # noqa: E402
from valkey_cluster import ValkeyCluster  # noqa: E402


@pytest.fixture(scope="module")
def valkey_cluster() -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster().start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
async def raw(valkey_cluster: ValkeyCluster) -> AsyncIterator[RedisCluster]:
    """A cluster client of the tests' own, to look at keys wherever they live."""
    client = RedisCluster.from_url(valkey_cluster.url, decode_responses=True, protocol=2)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def gateways() -> Iterator[GatewayFactory]:
    """``make(*flags)``: a gateway process, not started yet; stopped at teardown."""
    with gateway_factory() as make:
        yield make
