"""take_over after a crash (docs/architecture.md §8, I3), set_config and list_owned."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from store_helpers import CONFIG, NOW, OWNER, leases_of, open_session

from duplex.errors import LeaseLost, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord

NEW = "gw-b"


async def test_take_over_from_a_dead_owner_bumps_incarnation_once(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.heartbeat_owner(OWNER, NOW, 3.0)  # lapses at NOW + 3
    rec = await store.take_over("s1", NEW, NOW + 5)
    again = await store.take_over("s1", NEW, NOW + 5)  # run twice
    assert again == rec
    assert (rec.owner, rec.incarnation, rec.last_activity) == (NEW, 2, NOW + 5)
    assert (rec.generation, rec.epoch, rec.config) == (1, 0, CONFIG)  # the rest stays
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 5 + 60) * 1000
    assert await store.list_owned(OWNER) == []
    assert await store.list_owned(NEW) == ["s1"]
    later = await store.take_over("s1", NEW, NOW + 9)  # the owner taking it again: no-op
    assert later == rec


async def test_i3_the_old_owners_writes_fail_after_a_take_over(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.take_over("s1", NEW, NOW + 5)
    with pytest.raises(LeaseLost, match="gw-b#2"):
        await store.renew("s1", OWNER, 1, NOW + 6)
    with pytest.raises(LeaseLost):
        await store.append_events("s1", OWNER, 1, [(1, "{}")], max_len=100)
    with pytest.raises(LeaseLost):
        await store.set_config("s1", OWNER, 1, "{}")
    with pytest.raises(LeaseLost):
        await store.close_session("s1", OWNER, 1)
    await store.append_events("s1", NEW, 2, [(1, "{}")], max_len=100)
    assert await store.journal_bounds("s1") == (1, 1)


async def test_take_over_is_refused_while_the_owner_lives(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.heartbeat_owner(OWNER, NOW, 3.0)
    with pytest.raises(SessionStateError) as err:
        await store.take_over("s1", NEW, NOW + 2.999)
    assert err.value.code == "session_owned_elsewhere"
    assert await store.get("s1") == session
    assert await store.list_owned(OWNER) == ["s1"]
    assert (await store.take_over("s1", NEW, NOW + 3)).incarnation == 2  # lapsed


async def test_take_over_by_the_live_owner_itself_is_a_no_op(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.heartbeat_owner(OWNER, NOW, 3.0)
    assert await store.take_over("s1", OWNER, NOW + 1) == session


async def test_racing_take_overs_have_one_winner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    takers = [f"gw-{n}" for n in range(6)]
    for name in takers:
        await store.heartbeat_owner(name, NOW, 60.0)  # live takers, dead OWNER
    results = await asyncio.gather(*(store.take_over("s1", name, NOW + 1) for name in takers),
                                   return_exceptions=True)
    winners = [r for r in results if isinstance(r, SessionRecord)]
    assert len(winners) == 1 and winners[0].incarnation == 2
    losers = [r for r in results if not isinstance(r, SessionRecord)]
    assert all(isinstance(r, SessionStateError) and r.code == "session_owned_elsewhere"
               for r in losers)
    owned = [sid for name in takers for sid in await store.list_owned(name)]
    assert owned == ["s1"] and winners[0].owner in takers


async def test_take_over_only_of_open_sessions(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    with pytest.raises(SessionStateError) as missing:
        await store.take_over("nope", NEW, NOW)
    assert missing.value.code == "session_not_found"
    await open_session(store, "claimed")
    await store.claim_expired(OWNER, NOW + 60)  # both s1 and claimed are claimed
    with pytest.raises(SessionStateError) as expiring:
        await store.take_over("claimed", NEW, NOW + 61)
    assert expiring.value.code == "session_closed"
    await open_session(store, "ended")
    await store.close_session("ended", OWNER, 1)
    with pytest.raises(SessionStateError) as closed:
        await store.take_over("ended", NEW, NOW)
    assert closed.value.code == "session_closed"


async def test_resume_after_a_take_over_goes_through_the_new_owner(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.detach("s1", 1, NOW + 1)
    await store.take_over("s1", NEW, NOW + 2)
    with pytest.raises(LeaseLost):
        await store.resume("s1", "digest-1", 1, "digest-2", OWNER, NOW + 3)
    rec = await store.resume("s1", "digest-1", 1, "digest-2", NEW, NOW + 3)
    assert (rec.owner, rec.incarnation, rec.generation, rec.detached_at) == (NEW, 2, 2, None)


async def test_set_config_is_fenced_and_safe_to_repeat(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await store.set_config("s1", OWNER, 1, '{"voice": "echo"}')
    await store.set_config("s1", OWNER, 1, '{"voice": "echo"}')
    rec = await store.get("s1")
    assert rec is not None and rec.config == '{"voice": "echo"}'
    with pytest.raises(LeaseLost):
        await store.set_config("s1", NEW, 1, "{}")
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError) as err:
        await store.set_config("s1", OWNER, 1, "{}")
    assert err.value.code == "session_closed"


async def test_list_owned(store: RedisSessionStore) -> None:
    await open_session(store, "b")
    await open_session(store, "a")
    await open_session(store, "c", owner=NEW)
    assert await store.list_owned(OWNER) == ["a", "b"]
    assert await store.list_owned(NEW) == ["c"]
    assert await store.list_owned("gw-none") == []
