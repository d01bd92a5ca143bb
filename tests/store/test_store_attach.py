"""detach / resume: the generation compare-and-swap of duplex.lease, in Lua."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from store_helpers import NOW, OWNER, leases_of

from duplex import lease
from duplex.errors import InvalidRequest, LeaseLost, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord


async def test_detach_starts_grace_once(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    assert await store.detach("s1", 1, NOW + 5) is True
    assert await store.detach("s1", 1, NOW + 9) is False  # retried: grace not restarted
    rec = await store.get("s1")
    assert rec is not None and rec.detached_at == NOW + 5
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 5 + 30) * 1000
    assert lease.expiry(rec.lease(), NOW + 35) is lease.ExpiryReason.DISCONNECT_GRACE


async def test_detach_of_an_older_generation_is_a_no_op(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.resume("s1", "digest-1", 1, "digest-2", OWNER, NOW + 1)
    assert await store.detach("s1", 1, NOW + 2) is False
    rec = await store.get("s1")
    assert rec is not None and rec.detached_at is None
    assert await store.detach("unknown", 1, NOW) is False


async def test_resume_rotates_token_and_bumps_generation(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.detach("s1", 1, NOW + 5)
    rec = await store.resume("s1", "digest-1", 1, "digest-2", OWNER, NOW + 8)
    assert (rec.generation, rec.detached_at, rec.resume_token_digest) == (2, None, "digest-2")
    assert rec.last_activity == NOW + 8
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 8 + 60) * 1000
    again = await store.resume("s1", "digest-1", 1, "digest-2", OWNER, NOW + 8)
    assert again == rec  # a retried resume that already won gets the same answer


async def test_resume_refusals(session: SessionRecord, store: RedisSessionStore) -> None:
    with pytest.raises(InvalidRequest) as bad_token:
        await store.resume("s1", "wrong", 1, "digest-2", OWNER, NOW)
    assert bad_token.value.code == "invalid_resume_token"
    with pytest.raises(SessionStateError) as conflict:
        await store.resume("s1", "digest-1", 7, "digest-2", OWNER, NOW)
    assert conflict.value.code == "session_resume_conflict"
    with pytest.raises(LeaseLost):
        await store.resume("s1", "digest-1", 1, "digest-2", "gw-b", NOW)
    rec = await store.get("s1")
    assert rec is not None and (rec.generation, rec.resume_token_digest) == (1, "digest-1")
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError) as closed:
        await store.resume("s1", "digest-1", 1, "digest-2", OWNER, NOW)
    assert closed.value.code == "session_closed"


async def test_racing_resumes_have_one_winner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    tries = [store.resume("s1", "digest-1", 1, f"new-{i}", OWNER, NOW + 1) for i in range(8)]
    results = await asyncio.gather(*tries, return_exceptions=True)
    winners = [r for r in results if isinstance(r, SessionRecord)]
    assert len(winners) == 1 and winners[0].generation == 2
    # losers fail on the CAS or, once the token rotated, on the stale token
    assert all(isinstance(r, (SessionStateError, InvalidRequest)) for r in results
               if not isinstance(r, SessionRecord))
