"""A session's config and conversation share one byte budget in the store (the
client's half of ``--session-max-store-bytes``): past it a client's
``session.update`` or item is refused with ``session_store_full`` and changes
nothing; the conversation's own items make room within it."""

from __future__ import annotations

from typing import Any

import pytest

from duplex import commands as c
from duplex.config import SessionConfig, stored_size
from duplex.conversation import ConversationLimits, ItemBudget
from duplex.errors import InvalidRequest
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.session import SessionCore

SID = "s1"


def core(session_bytes: int, max_bytes: int = 10**6) -> SessionCore:
    limits = ConversationLimits(max_items=100, max_bytes=max_bytes, session_bytes=session_bytes)
    return SessionCore(Fence(SID, 1, 0, 0), SessionConfig(turn_detection=None),
                       budget=ItemBudget(limits))


def item(text: str, item_id: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "id": item_id,
            "content": [{"type": "input_text", "text": text}]}


def base() -> int:
    return stored_size(SessionConfig(turn_detection=None), SID)


def test_the_config_is_counted_from_the_start() -> None:
    s = core(10**6)
    assert s.budget.config_bytes == base() > 0


def test_a_config_past_the_share_is_refused_and_changes_nothing() -> None:
    s = core(base() + 100)
    before = s.config
    with pytest.raises(InvalidRequest) as err:
        s.update_session(c.UpdateSession(None, {"instructions": "i" * 200}))
    assert (err.value.code, err.value.param) == ("session_store_full", "session")
    assert s.config is before and s.effects() == []
    assert s.budget.config_bytes == base()
    s.update_session(c.UpdateSession(None, {"instructions": "i" * 50}))  # one that fits
    assert s.config.instructions == "i" * 50
    assert s.budget.config_bytes == stored_size(s.config, SID)
    assert any(getattr(e, "event", {}).get("type") == E.SESSION_UPDATED for e in s.effects())


def test_an_item_past_the_share_is_refused_though_the_conversation_has_room() -> None:
    s = core(base() + 1000)
    s.create_item(c.CreateItem(None, item("a" * 300, "a"), None))
    with pytest.raises(InvalidRequest) as err:
        s.create_item(c.CreateItem(None, item("b" * 500, "b"), None))
    assert (err.value.code, err.value.param) == ("session_store_full", "item")
    assert "delete items first" in err.value.message
    assert list(s.items) == ["a"]


def test_a_bigger_config_needs_the_conversation_to_shrink_first() -> None:
    s = core(base() + 1000)
    s.create_item(c.CreateItem(None, item("a" * 300, "a"), None))
    s.effects()
    with pytest.raises(InvalidRequest) as err:
        s.update_session(c.UpdateSession(None, {"instructions": "i" * 700}))
    assert err.value.code == "session_store_full"
    s.delete_item(c.DeleteItem(None, "a"))
    s.update_session(c.UpdateSession(None, {"instructions": "i" * 700}))
    assert s.config.instructions == "i" * 700


def test_the_conversations_own_items_make_room_within_what_the_config_leaves() -> None:
    budget = ItemBudget(ConversationLimits(max_items=100, max_bytes=10**6, session_bytes=2000))
    budget.set_config(1000)
    assert budget.byte_bound == 1000
    budget.set("a", item("a" * 400, "a"))
    budget.set("b", item("b" * 400, "b"))  # together past 1000: the oldest goes
    assert budget.evictions(["a", "b"], keep="b") == ["a"]


def test_the_journal_counts_the_bytes_redis_holds_not_characters() -> None:
    from gateway.session.journal import utf8_size

    assert utf8_size('{"a":"x"}') == 9
    assert utf8_size('{"a":"é\U0001f600"}') == len('{"a":""}') + 2 + 4
