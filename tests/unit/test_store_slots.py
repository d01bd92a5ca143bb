"""The key layout's slot math (duplex/store/keys.py): a session's keys and its
bucket's indexes share one hash slot, buckets are stable, and they spread over a
cluster's primaries."""

from __future__ import annotations

import zlib

import pytest
from redis.crc import key_slot

from duplex.store import keys

SLOTS = 16384


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


@pytest.mark.parametrize("sid", ["s1", "sess_k-Gcnwxwct0Sbr_Foaki5mFm", "a:b:c", "ü-ω"])
def test_a_session_and_its_bucket_indexes_share_one_slot(sid: str) -> None:
    bucket = keys.bucket_of(sid)
    together = [*keys.session_keys(sid), keys.leases(bucket), keys.expiring(bucket),
                keys.replication_barrier(bucket), keys.meta_template(bucket) % sid]
    assert {slot(k) for k in together} == {slot(keys.meta(sid))}
    assert keys.meta_template(bucket) % sid == keys.meta(sid)


def test_the_store_wide_keys_share_the_global_slot() -> None:
    store_wide = [keys.ADMITTED, keys.OWNERS, keys.OWNER_ADDRESSES, keys.RETAINED,
                  keys.RETAINED_SIZES, keys.owner_sessions("host:123:abcd")]
    assert len({slot(k) for k in store_wide}) == 1


def test_a_bucket_is_the_crc32_of_the_id_and_never_changes() -> None:
    # CRC-32 is fixed by its standard: every process and version agrees
    assert keys.bucket_of("s1") == zlib.crc32(b"s1") % 256 == 240
    assert keys.meta("s1") == "dg:{b240}:s1:meta"


def test_buckets_spread_over_three_primaries() -> None:
    third = SLOTS // 3
    per_primary = [0, 0, 0]
    for bucket in range(keys.BUCKETS):
        per_primary[min(2, slot(keys.leases(bucket)) // third)] += 1
    # 256 tags over 3 equal slot ranges: each near a third
    assert all(70 <= n <= 100 for n in per_primary), per_primary
    sessions = [0, 0, 0]
    for n in range(3000):
        sessions[min(2, slot(keys.meta(f"sess_{n}")) // third)] += 1
    assert all(800 <= n <= 1200 for n in sessions), sessions


def test_a_tag_outside_the_buckets_is_refused() -> None:
    with pytest.raises(ValueError):
        keys.tag(keys.BUCKETS)
    with pytest.raises(ValueError):
        keys.tag(-1)


def test_a_bucket_template_names_what_the_bucket_functions_name() -> None:
    # due_buckets.lua builds the reaper's index names from these templates
    for bucket in range(keys.BUCKETS):
        assert keys.bucket_template("leases") % bucket == keys.leases(bucket)
        assert keys.bucket_template("expiring") % bucket == keys.expiring(bucket)
