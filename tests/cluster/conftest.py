"""A real 3-primary/3-replica Valkey Cluster (``tests/valkey_cluster.py``), one per
test module, and gateway processes on it (as in tests/faults)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
_FAULTS = str(Path(__file__).resolve().parent.parent / "faults")
_TELEPHONY = str(Path(__file__).resolve().parent.parent / "telephony")
for _path in (_E2E, _FAULTS, _TELEPHONY):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from gateway_process import GatewayProcess, stop_all  # noqa: E402
from valkey_cluster import ValkeyCluster  # noqa: E402

BASE_ARGS = ("--plugin", "tone", "--output-lead-ms", "300")


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
def gateways() -> Iterator[Callable[..., GatewayProcess]]:
    """``make(*flags)``: a gateway process, not started yet; stopped at teardown."""
    made: list[GatewayProcess] = []
    dirs: list[Path] = []

    def make(*flags: str) -> GatewayProcess:
        data_dir = Path(tempfile.mkdtemp(prefix="dg-gw-"))
        dirs.append(data_dir)
        proc = GatewayProcess(data_dir, args=[*BASE_ARGS, *flags])
        made.append(proc)
        return proc

    try:
        yield make
    finally:
        stop_all(made, timeout_s=5.0)
        for proc in made:
            if proc.output:
                print(f"--- gateway {proc.address or '(not ready)'} log tail ---")
                print("".join(proc.output[-60:]), end="")
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)
