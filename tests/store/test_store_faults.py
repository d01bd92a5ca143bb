"""The client under faults: explicit retries, restarts, hung and dead servers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis
from redis.asyncio.retry import Retry
from redis_server import RedisServer
from store_helpers import NOW, OWNER, open_session

from duplex.errors import InvalidRequest, SessionStateError, StoreUnavailable
from duplex.store import RedisSessionStore, connect
from duplex.store.base import StoreConflict
from duplex.store.client import sentinel_target
from duplex.store.embedded import wait_until


@pytest.fixture
async def aof_server() -> AsyncIterator[RedisServer]:
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.close()


def test_connect_pins_retries_protocol_and_timeouts() -> None:
    client = connect("redis://127.0.0.1:1/0", timeout_s=0.5)
    kwargs = client.connection_pool.connection_kwargs
    retry = kwargs["retry"]
    assert isinstance(retry, Retry) and retry.get_retries() > 0  # from_url's default is 0
    assert kwargs["protocol"] == 2
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.5
    assert kwargs["decode_responses"] is True


@pytest.mark.parametrize("url", ["http://x", "localhost:6379", "sentinel://x/m"])
def test_connect_rejects_other_schemes(url: str) -> None:
    with pytest.raises(ValueError, match="scheme"):
        connect(url)


@pytest.mark.parametrize(("url", "sentinels", "master", "password"), [
    ("redis+sentinel://h1:26380,h2/main", [("h1", 26380), ("h2", 26379)], "main", None),
    ("redis+sentinel://:s%40cret@[::1]:5,[::2]/gw", [("::1", 5), ("::2", 26379)], "gw",
     "s@cret"),
])
def test_sentinel_urls(url: str, sentinels: list[tuple[str, int]], master: str,
                       password: str | None) -> None:
    assert sentinel_target(url) == (sentinels, master, password)
    client = connect(url, timeout_s=0.5)  # lazily: nothing is reached yet
    kwargs = client.connection_pool.connection_kwargs
    assert isinstance(kwargs["retry"], Retry) and kwargs["protocol"] == 2


@pytest.mark.parametrize(("url", "why"), [
    ("redis+sentinel://h1:26379", "names its master"),
    ("redis+sentinel://h1:port/m", "bad Sentinel port"),
    ("redis+sentinel://h1,:1/m", "no Sentinel host"),
])
def test_bad_sentinel_urls(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        connect(url)


async def test_unix_socket_url(redis_server: RedisServer) -> None:
    store = RedisSessionStore(connect(redis_server.unix_url))
    try:
        await store.ping()
        assert (await open_session(store)).state == "open"
    finally:
        await store.close()


async def test_restart_is_transparent_and_aof_keeps_the_session(aof_server: RedisServer) -> None:
    store = RedisSessionStore(connect(aof_server.url))
    try:
        await open_session(store)
        await store.append_events("s1", OWNER, 1, [(1, "a"), (2, "b")], max_len=100)
        aof_server.kill()
        aof_server.restart()
        # the stale pooled connection fails, the retry reconnects, NOSCRIPT reloads
        assert await store.append_events("s1", OWNER, 1, [(3, "c")], max_len=100) == 3
        assert await store.read_journal("s1", 0) == [(1, "a"), (2, "b"), (3, "c")]
    finally:
        await store.close()


async def test_dead_server_is_store_unavailable(redis_server: RedisServer) -> None:
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.2, retries=1))
    try:
        redis_server.kill()
        with pytest.raises(StoreUnavailable, match="renew"):
            await store.renew("s1", OWNER, 1, 0.0)
    finally:
        await store.close()


async def test_hung_server_fails_within_the_store_deadline(redis_server: RedisServer) -> None:
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.3), timeout_s=1.0)
    try:
        await store.ping()
        redis_server.pause()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await open_session(store)
        assert time.monotonic() - started < 2.0
        redis_server.resume()
        await store.ping()  # recovers once the server runs again
    finally:
        redis_server.resume()
        await store.close()


async def test_hung_server_fails_on_client_timeouts_alone(redis_server: RedisServer) -> None:
    # no store deadline: connect()'s socket timeouts and bounded retries must end it
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.1, retries=2),
                              timeout_s=None)
    try:
        await store.ping()
        redis_server.pause()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="unreachable"):
            await store.ping()
        assert time.monotonic() - started < 3.0
    finally:
        redis_server.resume()
        await store.close()


async def test_a_write_no_replica_acknowledged_does_not_count(
        redis_server: RedisServer) -> None:
    # a lone server has no replica: WAIT answers 0 after its deadline
    store = RedisSessionStore(connect(redis_server.url, timeout_s=0.4), timeout_s=0.4,
                              replica_acks=1)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="0 of 1 Redis replica"):
            await open_session(store)
        assert time.monotonic() - started < 0.4  # WAIT gave up inside the op's deadline
        with pytest.raises(StoreUnavailable, match="settled_last_seq reached 0 of 1"):
            await store.settled_last_seq("s1")  # a read that must prove its writes durable
        with pytest.raises(ValueError):
            RedisSessionStore(connect(redis_server.url), replica_acks=-1)
    finally:
        await store.close()


async def test_with_replica_acks_a_script_refusal_is_still_a_domain_error(
        redis_server: RedisServer) -> None:
    """WAIT runs pipelined after each durable script; a script that refuses must
    still surface as its domain error, not as the pipeline's rewritten reply."""
    primary = redis.Redis(port=redis_server.port, decode_responses=True)
    primary.config_set("repl-diskless-sync-delay", 0)  # the replica syncs at once
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(redis_server.port)]).start()
    assert wait_until(lambda: primary.info("replication")["connected_slaves"] == 1, 10.0)
    store = RedisSessionStore(connect(redis_server.url), replica_acks=1)
    try:
        await open_session(store)
        with pytest.raises(SessionStateError) as exists:
            await open_session(store, digest="another-token")  # not a retry: refused
        assert exists.value.code == "session_exists"
        with pytest.raises(InvalidRequest) as bad:
            await store.resume("s1", "not-the-digest", 0, "digest-2", OWNER, NOW)
        assert bad.value.code == "invalid_resume_token"
        with pytest.raises(StoreConflict) as gap:
            await store.append_events("s1", OWNER, 1, [(5, "{}")], max_len=9)
        assert gap.value.code == "journal_gap"
        assert await store.settled_last_seq("s1") == 0
    finally:
        await store.close()
        replica.close()
        primary.close()
