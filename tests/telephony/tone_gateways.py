"""The gateway processes the telephony tests start: the tone plugin (reply audio
300 ms ahead) on the tests' Redis, plus a carrier's flags (a module of its own:
importing from ``conftest`` is ambiguous across test folders)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gateway_process import GatewayProcess
from redis_server import RedisServer


def tone_gateway(tmp: Path, redis: RedisServer, *flags: str) -> GatewayProcess:
    """One, not yet started."""
    return GatewayProcess(tmp, args=["--plugin", "tone", "--output-lead-ms", "300",
                                     "--redis-url", redis.url, *flags])


def serving(tmp: Path, redis: RedisServer, *flags: str) -> Iterator[GatewayProcess]:
    """One, started, and stopped when the generator closes (a fixture's body)."""
    proc = tone_gateway(tmp, redis, *flags)
    try:
        yield proc.start()
    finally:
        proc.stop()


def serving_two(tmp: Path, redis: RedisServer,
                *flags: str) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two sharing the Redis (in ``tmp``'s ``a`` and ``b``), started, and stopped when
    the generator closes (a fixture's body)."""
    a, b = (tone_gateway(tmp / name, redis, *flags) for name in ("a", "b"))
    try:
        yield a.start(), b.start()
    finally:
        a.stop()
        b.stop()
