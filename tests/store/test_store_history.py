"""Conversation history (I6): insert, replace (truncate), delete, order."""

from __future__ import annotations

import pytest
from store_helpers import OWNER

from duplex.errors import InvalidRequest, LeaseLost, SessionStateError
from duplex.store import RedisSessionStore, SessionRecord


def item(item_id: str, text: str = "") -> str:
    return f'{{"id": "{item_id}", "text": "{text}"}}'


async def fill(store: RedisSessionStore, *ids: str) -> None:
    for item_id in ids:
        await store.history_append("s1", OWNER, 1, item_id, item(item_id))


async def test_append_in_order_and_after_a_given_item(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await fill(store, "a", "b", "c")
    assert await store.history_append("s1", OWNER, 1, "x", item("x"), previous_item_id="a")
    assert await store.history_append("s1", OWNER, 1, "r", item("r"), previous_item_id="root")
    assert await store.history("s1") == [item(i) for i in ("r", "a", "x", "b", "c")]


async def test_append_of_an_existing_id_only_replaces_it(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await fill(store, "a", "b")
    assert await store.history_append("s1", OWNER, 1, "a", item("a", "v2")) is False
    assert await store.history_append("s1", OWNER, 1, "a", item("a", "v2"), "b") is False
    assert await store.history("s1") == [item("a", "v2"), item("b")]


async def test_append_after_a_missing_item_writes_nothing(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await fill(store, "a")
    with pytest.raises(InvalidRequest) as err:
        await store.history_append("s1", OWNER, 1, "x", item("x"), previous_item_id="zz")
    assert err.value.code == "item_not_found"
    assert await store.history("s1") == [item("a")]


async def test_replace_truncates_in_place(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await fill(store, "a", "b")
    await store.history_replace("s1", OWNER, 1, "a", item("a", "heard"))
    await store.history_replace("s1", OWNER, 1, "a", item("a", "heard"))  # retried
    assert await store.history("s1") == [item("a", "heard"), item("b")]
    with pytest.raises(InvalidRequest):
        await store.history_replace("s1", OWNER, 1, "zz", item("zz"))
    assert await store.history("s1") == [item("a", "heard"), item("b")]


async def test_delete_is_true_once(session: SessionRecord, store: RedisSessionStore) -> None:
    await fill(store, "a", "b", "c")
    assert await store.history_delete("s1", OWNER, 1, "b") is True
    assert await store.history_delete("s1", OWNER, 1, "b") is False
    assert await store.history("s1") == [item("a"), item("c")]


async def test_history_writes_are_fenced(
    session: SessionRecord, store: RedisSessionStore
) -> None:
    await fill(store, "a")
    with pytest.raises(LeaseLost):
        await store.history_append("s1", "gw-b", 1, "x", item("x"))
    with pytest.raises(LeaseLost):
        await store.history_replace("s1", OWNER, 2, "a", item("a", "stale"))
    with pytest.raises(LeaseLost):
        await store.history_delete("s1", "gw-b", 1, "a")
    assert await store.history("s1") == [item("a")]
    await store.close_session("s1", OWNER, 1)
    with pytest.raises(SessionStateError):
        await store.history_append("s1", OWNER, 1, "x", item("x"))
    assert await store.history("unknown") == []
