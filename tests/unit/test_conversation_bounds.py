"""I8 for conversations: bounded in items and bytes; a client's item that does
not fit is refused, the conversation's own items make room by forgetting the
oldest (``duplex.conversation``)."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest

from duplex import commands as c
from duplex import effects as fx
from duplex.config import SessionConfig
from duplex.conversation import ITEM_OVERHEAD, ConversationLimits, ItemBudget, item_size
from duplex.errors import InvalidRequest
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.session import SessionCore


def core(max_items: int = 3, max_bytes: int = 10_000, **kw: Any) -> SessionCore:
    return SessionCore(Fence("s1", 1, 0, 0), SessionConfig(turn_detection=None),
                       budget=ItemBudget(ConversationLimits(max_items, max_bytes)), **kw)


def text_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": text}]}
    if item_id:
        item["id"] = item_id
    return item


def add(s: SessionCore, text: str, item_id: str | None = None) -> list[fx.Effect]:
    s.create_item(c.CreateItem(None, text_item(text, item_id), None))
    return s.effects()


def commit(s: SessionCore) -> list[fx.Effect]:
    s.audio_appended(200.0)
    s.commit(c.CommitInput(None))
    return s.effects()


def deleted(effects: list[fx.Effect]) -> list[str]:
    return [e.event["item_id"] for e in effects
            if isinstance(e, fx.Emit) and e.event["type"] == E.ITEM_DELETED]


def test_a_client_item_past_the_item_bound_is_refused_and_changes_nothing() -> None:
    s = core(max_items=2)
    add(s, "one", "a")
    add(s, "two", "b")
    with pytest.raises(InvalidRequest) as err:
        add(s, "three", "c")
    assert (err.value.code, err.value.param) == ("conversation_full", "item")
    assert "at most 2 items" in err.value.message
    assert list(s.items) == ["a", "b"] and s.effects() == []


def test_a_client_item_past_the_byte_bound_is_refused() -> None:
    probe = core()
    add(probe, "x" * 5, "a")
    one = probe.budget.total  # what a small item holds in the store
    s = core(max_bytes=2 * one + 5)
    add(s, "x" * 5, "a")
    with pytest.raises(InvalidRequest) as err:
        add(s, "y" * 20, "b")
    assert err.value.code == "conversation_full"
    add(s, "z" * 5, "c")  # one that fits still goes in
    assert list(s.items) == ["a", "c"]


def test_an_item_counts_every_field_it_is_stored_with_not_only_its_words() -> None:
    plain = text_item("hi")
    padded = {**plain, "extra": "p" * 1000}
    assert item_size(padded) == item_size(plain) + len(', "extra": ""') + 1000
    assert item_size(plain) == ITEM_OVERHEAD + len(json.dumps(plain))


def test_a_committed_turn_makes_room_by_forgetting_the_oldest() -> None:
    s = core(max_items=2)
    add(s, "one", "a")
    add(s, "two", "b")
    effects = commit(s)
    assert deleted(effects) == ["a"]
    assert fx.ForgetItem("a") in effects
    assert list(s.items) == ["b", next(reversed(s.items))] and len(s.items) == 2


def test_a_transcript_that_outgrows_the_bytes_forgets_the_oldest() -> None:
    def conversation(max_bytes: int) -> tuple[SessionCore, str]:
        s = core(max_items=10, max_bytes=max_bytes)
        add(s, "a" * 40, "a")
        add(s, "b" * 5, "b")
        commit(s)
        return s, next(reversed(s.items))

    probe, user_item = conversation(10**6)
    probe.transcript(user_item, "w" * 30)
    s, _ = conversation(probe.budget.total - 1)  # the transcript takes it past the bound
    s.effects()
    s.transcript(user_item, "w" * 30)  # now over the byte bound: "a" goes
    effects = s.effects()
    assert deleted(effects) == ["a"]
    assert list(s.items) == ["b", user_item]
    assert s.budget.total == sum(item_size(i) for i in s.items.values())


def test_a_reply_makes_room_and_never_forgets_itself() -> None:
    s = core(max_items=1)
    s.create_response(c.CreateResponse(None, None, None, None, False))
    r = s.response
    assert r is not None
    assert s.assistant_audio(r.fence, "AAAA", 100.0, "hello there")
    s.response_end(r.fence)
    assert list(s.items) == [r.item_id]
    commit(s)  # the user's next turn: the reply is now the oldest
    assert r.item_id not in s.items and len(s.items) == 1


def test_a_deletion_gives_its_bytes_back() -> None:
    s = core(max_items=10)
    add(s, "hello", "a")
    assert s.budget.total == item_size(s.items["a"]) > item_size(text_item("hello"))
    s.delete_item(c.DeleteItem(None, "a"))
    assert s.budget.total == 0


def test_a_restored_conversation_is_counted() -> None:
    items: OrderedDict[str, dict[str, Any]] = OrderedDict(
        (f"i{n}", {**text_item("abc"), "id": f"i{n}"}) for n in range(3))
    s = core(max_items=3, items=items)
    assert len(s.budget.sizes) == 3
    with pytest.raises(InvalidRequest):
        add(s, "four")


def test_evictions_skip_the_kept_item_and_unknown_ids() -> None:
    budget = ItemBudget(ConversationLimits(max_items=1, max_bytes=10**6))
    budget.set("a", text_item("a"))
    budget.set("b", text_item("b"))
    assert budget.evictions(["ghost", "b", "a"], keep="b") == ["a"]
    assert budget.evictions([]) == []
