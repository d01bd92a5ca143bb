"""Fault-injection fixtures: real Redis servers that die or hang, real gateways that crash.

Everything here is a real process: a Redis/Valkey server (``tests/redis_server.py``),
``duplex-gateway serve`` processes (``tests/gateway_process.py``, made and stopped by
``fault_helpers.gateway_factory``) and WebSocket clients.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The e2e helpers (``client.py``) are shared with these tests.
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from fault_helpers import GatewayFactory, gateway_factory  # noqa: E402
from redis_server import RedisServer  # noqa: E402


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """A Redis with ``appendonly yes``: what it acknowledged survives a SIGKILL."""
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def gateways() -> Iterator[GatewayFactory]:
    """``make(*flags, data_dir=None)``: a gateway process, not started yet; stopped at
    teardown (``fault_helpers.gateway_factory``)."""
    with gateway_factory() as make:
        yield make


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A short dir for an embedded Valkey's socket and AOF, shared by gateways in turn."""
    path = Path(tempfile.mkdtemp(prefix="dg-data-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
