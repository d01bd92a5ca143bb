"""Owner heartbeats and the reaper's claims: each overdue session to exactly one claimer."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import cast

import pytest
import redis.asyncio as aioredis
from store_helpers import NOW, OWNER, indexed, leases_of, open_session

from duplex import lease
from duplex.errors import CapacityError, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord, connect, keys

IDLE = lease.ExpiryReason.IDLE_TTL.value
GRACE = lease.ExpiryReason.DISCONNECT_GRACE.value
IDLE_DUE = NOW + 60  # open_session's default idle_ttl_s


async def meta(raw: aioredis.Redis, sid: str) -> dict[str, str]:
    return cast(dict[str, str], await raw.hgetall(keys.meta(sid)))


# -- heartbeats ------------------------------------------------------------------------


async def test_heartbeat_keeps_an_owner_alive_until_its_deadline(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    assert not await store.owner_alive(OWNER, NOW)  # never beat: dead
    await store.heartbeat_owner(OWNER, NOW, 3.0)
    await store.heartbeat_owner(OWNER, NOW, 3.0)  # re-sent: same deadline
    assert await raw.zscore(keys.OWNERS, OWNER) == (NOW + 3) * 1000
    assert await store.owner_alive(OWNER, NOW + 2.999)
    assert not await store.owner_alive(OWNER, NOW + 3)  # now >= deadline: dead
    await store.heartbeat_owner(OWNER, NOW - 10, 3.0)  # late beat: never moves back
    assert await raw.zscore(keys.OWNERS, OWNER) == (NOW + 3) * 1000
    await store.heartbeat_owner(OWNER, NOW + 1, 3.0)
    assert await store.owner_alive(OWNER, NOW + 3.5)


async def test_retire_owner(store: RedisSessionStore) -> None:
    await store.heartbeat_owner(OWNER, NOW, 3.0)
    await store.retire_owner(OWNER)
    await store.retire_owner(OWNER)  # twice: harmless
    assert not await store.owner_alive(OWNER, NOW)
    assert await store.owner_alive("gw-other", NOW) is False
    with pytest.raises(ValueError):
        await store.heartbeat_owner(OWNER, NOW, 0)


async def test_an_owner_address_is_given_only_while_its_owner_lives(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    address = "ws://10.0.0.7:8000"
    assert await store.owner_address(OWNER, NOW) is None  # never beat
    await store.heartbeat_owner(OWNER, NOW, 3.0, address)
    await store.heartbeat_owner(OWNER, NOW, 3.0, address)  # re-sent: same
    assert await store.owner_address(OWNER, NOW + 2.999) == address
    assert await store.owner_address(OWNER, NOW + 3) is None  # heartbeat lapsed
    await store.heartbeat_owner("gw-quiet", NOW, 3.0)  # beats but cannot serve others
    assert await store.owner_alive("gw-quiet", NOW)
    assert await store.owner_address("gw-quiet", NOW) is None
    await store.retire_owner(OWNER)
    assert await store.owner_address(OWNER, NOW) is None
    assert await raw.hget(keys.OWNER_ADDRESSES, OWNER) is None  # retiring removes it


# -- claims ----------------------------------------------------------------------------


async def test_claims_follow_the_lease_rules_idle_and_grace(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await open_session(store, "idle")
    await open_session(store, "gone")
    await store.detach("gone", 1, NOW + 5)  # grace 30 s: due NOW + 35
    assert await store.claim_expired(OWNER, NOW + 34.999) == []
    assert await store.claim_expired(OWNER, NOW + 35) == [("gone", GRACE, OWNER)]
    assert await store.claim_expired(OWNER, IDLE_DUE - 0.001) == []
    assert await store.claim_expired(OWNER, IDLE_DUE) == [("idle", IDLE, OWNER)]
    m = await meta(raw, "idle")
    assert (m["state"], m["expiring_by"]) == ("expiring", OWNER)
    assert await raw.zscore(leases_of("idle"), "idle") is None
    # a claimed session keeps its admission slot until it is ended
    assert await store.list_owned(OWNER) == ["gone", "idle"]
    rec = await store.get("idle")
    assert rec is not None and not rec.is_open


async def test_claim_run_twice_claims_once(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    assert await store.claim_expired(OWNER, IDLE_DUE) == [("s1", IDLE, OWNER)]
    before = await meta(raw, "s1")
    assert await store.claim_expired(OWNER, IDLE_DUE) == []
    assert await meta(raw, "s1") == before


async def test_sessions_that_never_expire_are_never_claimed(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await open_session(store, "forever", idle_ttl_s=None)
    assert await store.claim_expired(OWNER, NOW + 1e9) == []
    assert await raw.zscore(leases_of("forever"), "forever") == math.inf


async def test_a_live_owners_sessions_go_only_to_that_owner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.heartbeat_owner(OWNER, IDLE_DUE, 3.0)
    assert await store.claim_expired("gw-b", IDLE_DUE + 1) == []
    rec = await store.get("s1")
    assert rec is not None and rec.state == "open"
    assert await store.claim_expired(OWNER, IDLE_DUE + 1) == [("s1", IDLE, OWNER)]


@pytest.mark.parametrize("last_beat", [None, IDLE_DUE - 3.0])  # never beat / beat lapsed
async def test_a_dead_owners_sessions_go_to_anyone(
    session: SessionRecord, store: RedisSessionStore, last_beat: float | None
) -> None:
    if last_beat is not None:
        await store.heartbeat_owner(OWNER, last_beat, 3.0)  # deadline == IDLE_DUE
    assert await store.claim_expired("gw-b", IDLE_DUE) == [("s1", IDLE, OWNER)]
    assert await store.claim_expired(OWNER, IDLE_DUE) == []  # taken: not twice


async def test_the_meta_hash_decides_not_a_stale_score(
    store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await open_session(store, "s1")
    await raw.zadd(leases_of("s1"), {"s1": NOW * 1000})  # stale: meta says NOW + 60
    await raw.zadd(leases_of("ghost"), {"ghost": NOW * 1000})  # meta never existed
    await open_session(store, "ended")
    await store.close_session("ended", OWNER, 1)
    await raw.zadd(leases_of("ended"), {"ended": NOW * 1000})
    assert await store.claim_expired(OWNER, NOW + 10) == []
    for sid in ("ghost", "ended"):
        assert await raw.zscore(leases_of(sid), sid) is None
    assert await raw.zrange(leases_of("s1"), 0, -1, withscores=True) == [("s1", IDLE_DUE * 1000)]


async def test_limit_bounds_one_claim(store: RedisSessionStore) -> None:
    for i in range(5):
        await open_session(store, f"s{i}", now=NOW + i)
    first = await store.claim_expired(OWNER, NOW + 100, limit=2)
    assert [sid for sid, _, _ in first] == ["s0", "s1"]  # most overdue first
    assert len(await store.claim_expired(OWNER, NOW + 100.1, limit=10)) == 3
    with pytest.raises(ValueError):
        await store.claim_expired(OWNER, NOW, limit=0)


@pytest.fixture
async def claimers(redis_url: str) -> AsyncIterator[list[RedisSessionStore]]:
    stores = [RedisSessionStore(connect(redis_url)) for _ in range(5)]
    try:
        yield stores
    finally:
        for s in stores:
            await s.close()


async def test_concurrent_claimers_get_each_session_exactly_once(
    store: RedisSessionStore, raw: aioredis.Redis, claimers: list[RedisSessionStore]
) -> None:
    for i in range(20):
        await open_session(store, f"s{i:02}", owner="gw-dead")

    async def reap(n: int, mine: RedisSessionStore) -> list[str]:
        name, got, tick = f"gw-{n}", [], 0
        await mine.heartbeat_owner(name, NOW, 1000.0)
        while batch := await mine.claim_expired(name, NOW + 100 + tick * 0.001, limit=3):
            got += [sid for sid, _, _ in batch]
            tick += 1
            await asyncio.sleep(0)  # let the others in between batches
        return got

    results = await asyncio.gather(*(reap(n, s) for n, s in enumerate(claimers)))
    every = [sid for got in results for sid in got]
    assert sorted(every) == [f"s{i:02}" for i in range(20)]  # all, none twice
    for n, got in enumerate(results):
        for sid in got:
            assert (await meta(raw, sid))["expiring_by"] == f"gw-{n}"
    assert await indexed(raw, keys.leases) == 0 and await indexed(raw, keys.expiring) == 20


async def test_an_abandoned_claim_is_offered_again(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    assert await store.claim_expired("gw-b", IDLE_DUE, claim_ttl_s=30) == [("s1", IDLE, OWNER)]
    assert await store.claim_expired("gw-c", IDLE_DUE + 29.999, claim_ttl_s=30) == []
    # gw-b never ended it (crashed, or lost the reply): the claim lapses
    assert await store.claim_expired("gw-c", IDLE_DUE + 30) == [("s1", IDLE, OWNER)]
    assert await store.finish_expiry("s1", "gw-b", EXPIRED) is None
    assert await store.finish_expiry("s1", "gw-c", EXPIRED) == 1


async def test_an_abandoned_claim_of_a_live_owner_stays_with_that_owner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.claim_expired(OWNER, IDLE_DUE)
    await store.heartbeat_owner(OWNER, IDLE_DUE + 30, 3.0)
    assert await store.claim_expired("gw-b", IDLE_DUE + 31) == []
    assert await store.claim_expired(OWNER, IDLE_DUE + 31) == [("s1", IDLE, OWNER)]


# -- ending a claimed session ----------------------------------------------------------

EXPIRED = json.dumps({"type": "session.expired", "event_id": "event_x",
                      "reason": IDLE, "server_event_seq": 0}, separators=(",", ":"))


async def test_finish_journals_one_terminal_at_the_next_seq(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.append_events("s1", OWNER, 1, [(1, "{}"), (2, "{}"), (3, "{}")], max_len=100)
    await store.claim_expired("gw-b", IDLE_DUE)
    assert await store.finish_expiry("s1", "gw-b", EXPIRED) == 4
    assert await store.finish_expiry("s1", "gw-b", EXPIRED) is None  # run twice
    [(seq, text)] = await store.read_journal("s1", 3)
    event = json.loads(text)
    assert (seq, event["server_event_seq"], event["type"]) == (4, 4, "session.expired")
    assert event == {**json.loads(EXPIRED), "server_event_seq": 4}
    assert await raw.xlen(keys.journal("s1")) == 4
    rec = await store.get("s1")
    assert rec is not None and (rec.state, rec.last_seq, rec.generation) == ("expired", 4, 2)
    assert await store.list_owned(OWNER) == []
    assert await raw.zscore(keys.expiring(keys.bucket_of("s1")), "s1") is None
    for key in ("meta", "journal"):
        assert 0 < await raw.pttl(keys.session_key("s1", key)) <= 3_600_000


async def test_a_claim_holds_the_admission_slot_until_finished(
    store: RedisSessionStore,
) -> None:
    await open_session(store, "s1", max_sessions=1, per_owner=1)
    await store.claim_expired("gw-b", IDLE_DUE)
    with pytest.raises(CapacityError):
        await open_session(store, "s2", max_sessions=1)  # global slot still held
    with pytest.raises(CapacityError):
        await open_session(store, "s2", max_sessions=9, per_owner=1)  # and the owner's
    await store.finish_expiry("s1", "gw-b", EXPIRED)
    await open_session(store, "s2", max_sessions=1, per_owner=1)


async def test_finish_without_a_claim_appends_nothing(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    assert await store.finish_expiry("s1", OWNER, EXPIRED) is None  # open, unclaimed
    assert await store.finish_expiry("nope", OWNER, EXPIRED) is None
    await store.claim_expired("gw-b", IDLE_DUE)
    assert await store.finish_expiry("s1", "gw-c", EXPIRED) is None  # not the claimer
    assert await raw.xlen(keys.journal("s1")) == 0
    rec = await store.get("s1")
    assert rec is not None and rec.state == "expiring"


@pytest.mark.parametrize("bad", [
    '{"type":"session.expired"}',
    '{"type":"session.expired","server_event_seq":1}',
    '{"server_event_seq":0,"x":{"server_event_seq":0}}',
    '{"server_event_seq":5,"x":{"server_event_seq":0}}',
    '"server_event_seq":0',
])
async def test_finish_refuses_an_event_without_its_placeholder(
    session: SessionRecord, store: RedisSessionStore, bad: str
) -> None:
    await store.claim_expired("gw-b", IDLE_DUE)
    with pytest.raises(ValueError):
        await store.finish_expiry("s1", "gw-b", bad)
    rec = await store.get("s1")
    assert rec is not None and rec.state == "expiring"


async def test_finish_does_not_repeat_a_terminal_the_dead_owner_journaled(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    closed = '{"type":"session.closed","server_event_seq":2}'
    await store.append_events("s1", OWNER, 1, [(1, "{}"), (2, closed)], max_len=100)
    # ... and the owner died before close_session
    await store.claim_expired("gw-b", IDLE_DUE)
    assert await store.finish_expiry("s1", "gw-b", EXPIRED) == 2
    assert await raw.xlen(keys.journal("s1")) == 2
    rec = await store.get("s1")
    assert rec is not None and rec.state == "expired"


async def test_the_owner_ends_its_own_claim_with_its_fenced_writes(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.claim_expired(OWNER, IDLE_DUE)
    # the owner's runner: cleanup, the terminal event, then close (I5)
    await store.renew("s1", OWNER, 1, IDLE_DUE + 1)
    assert await raw.zscore(leases_of("s1"), "s1") is None  # a claim is not re-indexed
    expired = EXPIRED.replace('"server_event_seq":0', '"server_event_seq":1')
    assert await store.append_events("s1", OWNER, 1, [(1, expired)], max_len=100,
                                     now=IDLE_DUE + 1) == 1
    assert await store.close_session("s1", OWNER, 1, state="expired") is True
    assert await store.close_session("s1", OWNER, 1, state="expired") is False
    rec = await store.get("s1")
    assert rec is not None and (rec.state, rec.last_seq) == ("expired", 1)
    assert await store.list_owned(OWNER) == []
    assert await indexed(raw, keys.expiring) == 0 and await indexed(raw, keys.leases) == 0
    assert await store.finish_expiry("s1", OWNER, EXPIRED) is None


async def test_an_owner_back_from_the_dead_cannot_end_a_foreign_claim(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.claim_expired("gw-b", IDLE_DUE)
    with pytest.raises(SessionStateError) as err:
        await store.append_events("s1", OWNER, 1, [(1, "{}")], max_len=100)
    assert err.value.code == "session_closed"
    assert await store.close_session("s1", OWNER, 1, state="expired") is False
    assert await store.finish_expiry("s1", "gw-b", EXPIRED) == 1
