"""Fault-injection fixtures: real Redis servers that die or hang, real gateways that crash.

Everything here is a real process: a Redis/Valkey server (``tests/redis_server.py``),
``duplex-gateway serve`` processes (``tests/gateway_process.py``) and WebSocket clients.
Gateways still running at teardown get SIGTERM, all at once, and SIGKILL after
``TEARDOWN_STOP_S``: a clean exit is what saves a gateway's coverage data (a test
that wants a crash kills its gateway itself). Their log tail is printed, which pytest
shows for a failed test.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The e2e helpers (``client.py``) are shared with these tests.
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from gateway_process import GatewayProcess, stop_all  # noqa: E402
from redis_server import RedisServer  # noqa: E402

BASE_ARGS = ("--plugin", "tone", "--output-lead-ms", "300")
TEARDOWN_STOP_S = 5.0  # a gateway stuck on a paused store is killed rather than waited for


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """A Redis with ``appendonly yes``: what it acknowledged survives a SIGKILL."""
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def gateways() -> Iterator[Callable[..., GatewayProcess]]:
    """``make(*flags, data_dir=None)``: a gateway process, not started yet.

    The data dir is short (a unix socket path must fit in 108 bytes) and removed at
    teardown. Two gateways in turn on one embedded Valkey share ``data_dir``.
    """
    made: list[GatewayProcess] = []
    dirs: list[Path] = []

    def make(*flags: str, data_dir: Path | None = None) -> GatewayProcess:
        if data_dir is None:
            data_dir = Path(tempfile.mkdtemp(prefix="dg-gw-"))
            dirs.append(data_dir)
        proc = GatewayProcess(data_dir, args=[*BASE_ARGS, *flags])
        made.append(proc)
        return proc

    try:
        yield make
    finally:
        stop_all(made, timeout_s=TEARDOWN_STOP_S)
        for proc in made:
            if proc.output:
                print(f"--- gateway {proc.address or '(not ready)'} log tail ---")
                print("".join(proc.output[-60:]), end="")
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A short dir for an embedded Valkey's socket and AOF, shared by gateways in turn."""
    path = Path(tempfile.mkdtemp(prefix="dg-data-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
