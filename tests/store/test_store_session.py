"""open / renew / close / get against a real server: admission, fencing (I3), retries."""

from __future__ import annotations

import asyncio
import math

import pytest
import redis.asyncio as aioredis
from store_helpers import CONFIG, NOW, OWNER, indexed, leases_of, open_session

from duplex import lease
from duplex.errors import CapacityError, InvalidRequest, LeaseLost, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord, keys

META_FIELDS = {
    "state", "owner", "incarnation", "generation", "epoch", "turn_id", "last_seq",
    "resume_token_digest", "config", "created_at", "last_activity", "detached_at",
    "grace_s", "idle_ttl_s",
}


async def test_open_creates_meta_lease_and_owner_slot(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    rec = await open_session(store, "s1")
    assert rec == SessionRecord(
        session_id="s1", owner=OWNER, incarnation=1, epoch=0, turn_id=0, generation=1,
        last_seq=0, state="open", config=CONFIG, resume_token_digest="digest-1",
        created_at=NOW, last_activity=NOW, detached_at=None, grace_s=30.0, idle_ttl_s=60.0,
    )
    assert set(await raw.hgetall(keys.meta("s1"))) == META_FIELDS
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 60.0) * 1000
    assert await raw.smembers(keys.owner_sessions("gw-a")) == {"s1"}
    assert await store.get("s1") == rec


async def test_lease_index_mirrors_pure_lease_deadline(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    rec = await open_session(store, "s1", now=NOW + 0.25)
    due = lease.deadline(rec.lease())
    assert due is not None and await raw.zscore(leases_of("s1"), "s1") == round(due * 1000)
    await open_session(store, "forever", idle_ttl_s=None)
    assert await raw.zscore(leases_of("forever"), "forever") == math.inf
    rec2 = await store.get("forever")
    assert rec2 is not None and lease.deadline(rec2.lease()) is None


async def test_retried_open_returns_the_same_session(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    first = await open_session(store, "s1", max_sessions=1)
    again = await open_session(store, "s1", max_sessions=1, now=NOW + 5)
    assert again == first
    assert await indexed(raw, keys.leases) == 1


@pytest.mark.parametrize(("owner", "digest"), [("gw-a", "other"), ("gw-b", "digest-1")])
async def test_open_of_a_taken_id_is_refused(
    store: RedisSessionStore, owner: str, digest: str
) -> None:
    await open_session(store, "s1")
    with pytest.raises(SessionStateError) as err:
        await open_session(store, "s1", owner=owner, digest=digest)
    assert err.value.code == "session_exists"


async def test_global_admission_limit_and_close_frees_the_slot(store: RedisSessionStore) -> None:
    await open_session(store, "a", owner="gw-a", max_sessions=2)
    await open_session(store, "b", owner="gw-b", max_sessions=2)
    with pytest.raises(CapacityError) as err:
        await open_session(store, "c", owner="gw-c", max_sessions=2)
    assert err.value.code == "resource_exhausted"
    assert await store.get("c") is None
    assert await store.close_session("a", "gw-a", 1)
    await open_session(store, "c", owner="gw-c", max_sessions=2)


async def test_per_owner_admission_limit(store: RedisSessionStore, raw: aioredis.Redis) -> None:
    await open_session(store, "a1", owner="gw-a", per_owner=1)
    with pytest.raises(CapacityError):
        await open_session(store, "a2", owner="gw-a", per_owner=1)
    await open_session(store, "b1", owner="gw-b", per_owner=1)  # another owner has room
    await store.close_session("a1", "gw-a", 1)
    assert await raw.scard(keys.owner_sessions("gw-a")) == 0
    await open_session(store, "a2", owner="gw-a", per_owner=1)


async def test_zero_per_owner_limit_means_unlimited(store: RedisSessionStore) -> None:
    for i in range(5):
        await open_session(store, f"s{i}", per_owner=0, max_sessions=5)


async def test_concurrent_opens_admit_exactly_max(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    opens = [open_session(store, f"s{i}", owner=f"gw-{i % 3}", max_sessions=5)
             for i in range(40)]
    results = await asyncio.gather(*opens, return_exceptions=True)
    admitted = [r for r in results if isinstance(r, SessionRecord)]
    refused = [r for r in results if isinstance(r, CapacityError)]
    assert (len(admitted), len(refused)) == (5, 35)
    assert await indexed(raw, keys.leases) == 5


async def test_concurrent_opens_of_one_owner_admit_exactly_its_limit(
    store: RedisSessionStore,
) -> None:
    opens = [open_session(store, f"s{i}", per_owner=3) for i in range(20)]
    results = await asyncio.gather(*opens, return_exceptions=True)
    assert sum(isinstance(r, SessionRecord) for r in results) == 3
    assert sum(isinstance(r, CapacityError) for r in results) == 17


async def test_renew_moves_activity_and_deadline(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.renew("s1", OWNER, 1, NOW + 10)
    await store.renew("s1", OWNER, 1, NOW + 10)  # retried: harmless
    await store.renew("s1", OWNER, 1, NOW + 4)  # late: never goes backwards
    rec = await store.get("s1")
    assert rec is not None and rec.last_activity == NOW + 10
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 70) * 1000


@pytest.mark.parametrize(("owner", "incarnation"), [("gw-b", 1), (OWNER, 2), (OWNER, 0)])
async def test_renew_by_a_stale_owner_is_lease_lost(
    session: SessionRecord, store: RedisSessionStore, owner: str, incarnation: int
) -> None:
    with pytest.raises(LeaseLost, match="gw-a#1"):
        await store.renew("s1", owner, incarnation, NOW + 1)
    rec = await store.get("s1")
    assert rec is not None and rec.last_activity == NOW


async def test_renew_of_unknown_or_closed_session(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    with pytest.raises(SessionStateError) as err:
        await store.renew("nope", OWNER, 1, NOW)
    assert err.value.code == "session_not_found"
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError) as err:
        await store.renew("s1", OWNER, 1, NOW)
    assert err.value.code == "session_closed"


async def test_close_is_true_once_and_keeps_keys_for_a_while(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    assert await store.close_session("s1", OWNER, 1) is True
    assert await store.close_session("s1", OWNER, 1) is False
    rec = await store.get("s1")
    assert rec is not None and rec.state == "closed" and rec.generation == 2
    assert await raw.zscore(leases_of("s1"), "s1") is None
    assert await raw.sismember(keys.owner_sessions("gw-a"), "s1") == 0
    assert 0 < await raw.pttl(keys.meta("s1")) <= 3_600_000
    with pytest.raises(SessionStateError) as err:
        await open_session(store, "s1")  # ids are never reused
    assert err.value.code == "session_exists"


async def test_close_as_expired_and_by_a_stale_owner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    with pytest.raises(LeaseLost):
        await store.close_session("s1", "gw-b", 1, state="expired")
    assert await store.close_session("s1", OWNER, 1, state="expired")
    rec = await store.get("s1")
    assert rec is not None and rec.state == "expired"
    assert await store.close_session("nope", OWNER, 1) is False
    with pytest.raises(ValueError):
        await store.close_session("s1", OWNER, 1, state="open")  # type: ignore[arg-type]


async def test_close_expires_every_session_key(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.append_events("s1", OWNER, 1, [(1, "{}")], max_len=100)
    await store.history_append("s1", OWNER, 1, "item1", "{}")
    await store.close_session("s1", OWNER, 1)
    for key in ("meta", "journal", "history", "items"):
        assert await raw.pttl(keys.session_key("s1", key)) > 0, key


async def test_get_unknown_session_and_malformed_ids(store: RedisSessionStore) -> None:
    assert await store.get("nope") is None
    for bad in ("", "a{b}", "a b", "a\nb", "x" * 300):
        with pytest.raises(InvalidRequest):
            await store.get(bad)
    with pytest.raises(InvalidRequest):
        await open_session(store, "ok", owner="gw{1}")
    # the gateway's own id shapes pass
    rec = await open_session(store, "sess_Ab-9_x", owner="host.example.com:4242:beef")
    assert rec.owner == "host.example.com:4242:beef"
