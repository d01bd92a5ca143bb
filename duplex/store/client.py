"""Building the Redis client: always explicit retries, timeouts and protocol.

``redis.asyncio.from_url`` alone gives connections *no* retries (research/redis.md
§4), so a server restart would surface as an error on the first command. We pin
RESP2 so reply shapes never change under us with a client upgrade, and bound
every socket wait so a hung (SIGSTOPped) server is an error, not a hang.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

SCHEMES = ("redis", "rediss", "unix")
PROTOCOL = 2


def connect(url: str, *, timeout_s: float = 2.0, retries: int = 3,
            max_connections: int = 256) -> aioredis.Redis:
    """A lazily connecting client for ``redis://``, ``rediss://`` or ``unix://`` URLs.

    ``timeout_s`` bounds each connect and each reply; a failed or timed-out
    command is retried ``retries`` times with jittered backoff (scripts are safe
    to run twice, so re-sending one is harmless).
    """
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported Redis URL scheme {scheme!r}; use one of {SCHEMES}")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        protocol=PROTOCOL,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(ExponentialWithJitterBackoff(base=0.02, cap=0.5), retries),
    )
    return aioredis.Redis(connection_pool=pool)
