"""The journal (I4): ordered, exactly-once, one round trip per batch, bounded."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from store_helpers import NOW, OWNER, leases_of

from duplex.errors import InvalidRequest, LeaseLost, SessionStateError
from duplex.journal import ReplayVerdict, plan_replay
from duplex.store import RedisSessionStore, SessionRecord, StoreConflict, keys


def events(first: int, last: int) -> list[tuple[int, str]]:
    return [(seq, f'{{"seq": {seq}}}') for seq in range(first, last + 1)]


async def test_append_and_read(session: SessionRecord, store: RedisSessionStore) -> None:
    assert await store.append_events("s1", OWNER, 1, events(1, 3), max_len=100) == 3
    assert await store.read_journal("s1", 0) == events(1, 3)
    assert await store.read_journal("s1", 1) == events(2, 3)
    assert await store.read_journal("s1", 1, limit=1) == events(2, 2)
    assert await store.read_journal("s1", 3) == []
    rec = await store.get("s1")
    assert rec is not None and rec.last_seq == 3


async def test_i4_retried_and_overlapping_batches_are_never_duplicated(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.append_events("s1", OWNER, 1, events(1, 3), max_len=100)
    assert await store.append_events("s1", OWNER, 1, events(1, 3), max_len=100) == 3
    assert await store.append_events("s1", OWNER, 1, events(2, 5), max_len=100) == 5
    assert await raw.xlen(keys.journal("s1")) == 5
    assert await store.read_journal("s1", 0) == events(1, 5)
    assert await store.append_events("s1", OWNER, 1, [], max_len=100) == 5


@pytest.mark.parametrize("batch", [events(5, 6), events(4, 4) + events(6, 6), [(4, "a"), (4, "b")]])
async def test_gaps_are_rejected_before_any_write(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis,
    batch: list[tuple[int, str]],
) -> None:
    await store.append_events("s1", OWNER, 1, events(1, 3), max_len=100)
    with pytest.raises(StoreConflict) as err:
        await store.append_events("s1", OWNER, 1, batch, max_len=100)
    assert err.value.code == "journal_gap"
    assert await raw.xlen(keys.journal("s1")) == 3
    rec = await store.get("s1")
    assert rec is not None and rec.last_seq == 3


async def test_append_is_fenced(session: SessionRecord, store: RedisSessionStore) -> None:
    with pytest.raises(LeaseLost):
        await store.append_events("s1", "gw-b", 1, events(1, 1), max_len=100)
    with pytest.raises(LeaseLost):
        await store.append_events("s1", OWNER, 2, events(1, 1), max_len=100)
    assert await store.journal_bounds("s1") == (None, 0)
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError):
        await store.append_events("s1", OWNER, 1, events(1, 1), max_len=100)
    with pytest.raises(ValueError):
        await store.append_events("s1", OWNER, 1, [(0, "{}")], max_len=100)


async def test_one_round_trip_per_batch(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.append_events("s1", OWNER, 1, events(1, 1), max_len=100)  # script cached
    await raw.config_resetstat()
    await store.append_events("s1", OWNER, 1, events(2, 51), max_len=1000)
    stats = await raw.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert stats["cmdstat_xadd"]["calls"] == 50


async def test_i8_maxlen_bounds_the_journal(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    for first in range(1, 1001, 100):
        await store.append_events("s1", OWNER, 1, events(first, first + 99), max_len=100)
    # MAXLEN ~ trims whole stream nodes (100 entries by default), never below max_len
    assert 100 <= await raw.xlen(keys.journal("s1")) < 300
    oldest, last = await store.journal_bounds("s1")
    assert last == 1000 and oldest is not None and oldest > 1


async def test_activity_and_high_water_marks(
    session: SessionRecord, store: RedisSessionStore, raw: aioredis.Redis
) -> None:
    await store.append_events("s1", OWNER, 1, events(1, 1), max_len=9, now=NOW + 3, turn_id=4)
    await store.append_events("s1", OWNER, 1, events(2, 2), max_len=9, now=NOW + 1, turn_id=2)
    rec = await store.get("s1")
    assert rec is not None and (rec.last_activity, rec.turn_id, rec.epoch) == (NOW + 3, 4, 0)
    assert await raw.zscore(leases_of("s1"), "s1") == (NOW + 3 + 60) * 1000


async def test_bounds_and_trim(session: SessionRecord, store: RedisSessionStore) -> None:
    assert await store.journal_bounds("s1") == (None, 0)
    await store.trim_journal("s1", 5)  # nothing yet: harmless
    await store.append_events("s1", OWNER, 1, events(1, 5), max_len=100)
    assert await store.journal_bounds("s1") == (1, 5)
    await store.trim_journal("s1", 2)
    await store.trim_journal("s1", 2)  # retried
    assert await store.journal_bounds("s1") == (3, 5)
    assert await store.read_journal("s1", 0) == events(3, 5)
    assert plan_replay(2, 3, 5).verdict is ReplayVerdict.REPLAY
    assert plan_replay(1, 3, 5).verdict is ReplayVerdict.JOURNAL_GAP
    await store.trim_journal("s1", 99)  # never past last_seq
    assert await store.journal_bounds("s1") == (None, 5)
    assert await store.settled_last_seq("s1") == 5  # trimmed, still the last seq
    assert await store.settled_last_seq("nobody") == 0
    assert await store.append_events("s1", OWNER, 1, events(6, 6), max_len=100) == 6
    assert await store.journal_bounds("s1") == (6, 6)
    assert await store.journal_bounds("unknown") == (None, 0)


async def test_an_append_trims_in_the_same_round_trip(
        session: SessionRecord, store: RedisSessionStore) -> None:
    await store.append_events("s1", OWNER, 1, events(1, 4), max_len=100, trim_upto=9)
    assert await store.journal_bounds("s1") == (None, 4)  # capped at last_seq: all, no more
    await store.append_events("s1", OWNER, 1, events(5, 8), max_len=100)
    assert await store.append_events("s1", OWNER, 1, events(9, 9), max_len=100,
                                     trim_upto=6) == 9
    assert await store.read_journal("s1", 0) == events(7, 9)
    with pytest.raises(LeaseLost):  # fenced first: a stale owner trims nothing
        await store.append_events("s1", "gw-b", 1, events(10, 10), max_len=100, trim_upto=8)
    assert await store.journal_bounds("s1") == (7, 9)


async def test_negative_cursor_is_invalid(store: RedisSessionStore) -> None:
    with pytest.raises(InvalidRequest):
        await store.read_journal("s1", -1)
