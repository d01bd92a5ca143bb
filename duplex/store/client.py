"""Building the Redis client: always explicit retries, timeouts and protocol.

``redis.asyncio.from_url`` alone gives connections *no* retries (research/redis.md
§4), so a server restart would surface as an error on the first command. We pin
RESP2 so reply shapes never change under us with a client upgrade, and bound
every socket wait so a hung (SIGSTOPped) server is an error, not a hang: per
command (``socket_timeouts``), or by a caller that bounds each of its calls itself
(``RedisSessionStore``: one deadline per call or batch). redis-py's per-command
timeout costs an ``asyncio.wait_for`` task on every send and a timer on every
reply; in the gateway that was most of its Redis client's CPU.

``redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER`` follows the primary that the
Sentinels name for ``MASTER`` across failovers: each new connection asks them,
and a connection that finds its server demoted reconnects. A deposed primary that
is still up stays writable, unreplicated, until Sentinel demotes it (~10 s):
``follow_primary`` drops the connections still on it sooner.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisError

SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
PROTOCOL = 2
SENTINEL_PORT = 26379


def connect(url: str, *, timeout_s: float = 2.0, retries: int = 3,
            max_connections: int = 256, socket_timeouts: bool = True) -> aioredis.Redis:
    """A lazily connecting client for ``redis://``, ``rediss://`` or ``unix://`` URLs.

    ``timeout_s`` bounds each connect, each wait for a pooled connection and,
    with ``socket_timeouts``, each send and reply; without, the caller must bound
    every call (a hung server would otherwise hang it). A failed or timed-out
    command is retried ``retries`` times with jittered backoff (scripts are safe
    to run twice, so re-sending one is harmless).
    """
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"unsupported Redis URL scheme {scheme!r}; use one of {SCHEMES}")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")
    options: dict[str, Any] = {
        "protocol": PROTOCOL,
        "decode_responses": True,
        "socket_timeout": timeout_s if socket_timeouts else None,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(ExponentialWithJitterBackoff(base=0.02, cap=0.5), retries),
    }
    if scheme == "redis+sentinel":
        return _via_sentinel(url, options, max_connections, timeout_s)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout_s, **options)
    return aioredis.Redis(connection_pool=pool)


def sentinel_target(url: str) -> tuple[list[tuple[str, int]], str, str | None]:
    """``redis+sentinel://[:PASSWORD@]H1:P1,H2:P2/MASTER`` → (sentinels, master,
    the primary's password)."""
    parts = urlsplit(url)
    auth, _, hosts = parts.netloc.rpartition("@")
    password = unquote(auth.partition(":")[2]) or None if auth else None
    sentinels = []
    for item in hosts.split(","):
        item = item.strip()
        host, _, port = (item.rpartition(":") if ":" in item and not item.endswith("]")
                         else (item, "", ""))
        if not host.strip():
            raise ValueError(f"no Sentinel host in {item!r} of the Redis URL")
        try:
            sentinels.append((host.strip("[]"), int(port or SENTINEL_PORT)))
        except ValueError:
            raise ValueError(f"bad Sentinel port in {item!r} of the Redis URL") from None
    master = parts.path.strip("/")
    if not master:
        raise ValueError("a redis+sentinel:// URL names its master: "
                         "redis+sentinel://HOST:PORT/MASTER")
    return sentinels, master, password


def _via_sentinel(url: str, options: dict[str, Any], max_connections: int,
                  timeout_s: float) -> aioredis.Redis:
    sentinels, master, password = sentinel_target(url)
    # the Sentinels are asked once per new connection: always with a timeout
    asked = {k: options[k] for k in ("protocol", "decode_responses", "socket_connect_timeout")}
    asked["socket_timeout"] = timeout_s
    # redis < 8.2 leaves Sentinel's constructor untyped, 8.2 types it: called
    # through Any so the check passes on either without an ignore
    make_sentinel: Any = Sentinel
    sentinel = make_sentinel(sentinels, sentinel_kwargs=asked, **options)
    client = sentinel.master_for(master, password=password, max_connections=max_connections)
    return cast(aioredis.Redis, client)


async def follow_primary(client: aioredis.Redis) -> int:
    """Drop ``client``'s connections to any server but the primary the Sentinels
    name now; how many it dropped (0 without Sentinel or when none is stale).

    A write that reached too few replicas may have gone to a primary that lost a
    failover and has not been demoted yet. redis-py drops only *idle* connections
    when it learns of a new primary, and only when it happens to ask; a connection
    busy at that moment would go back into the pool still on the old server. Any
    command in flight on a dropped connection fails and is retried on the new one.
    """
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool):
        return 0
    try:
        primary = tuple(await pool.get_master_address())  # type: ignore[no-untyped-call]
    except RedisError:
        return 0  # no Sentinel answers: keep what we have
    # pool internals (redis-py 5–8): there is no public list of in-use connections
    held = [*getattr(pool, "_available_connections", ()), *getattr(pool, "_in_use_connections", ())]
    stale = [c for c in held if (c.host, c.port) != primary]
    for connection in stale:
        await connection.disconnect()
    return len(stale)
