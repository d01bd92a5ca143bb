"""Rebuilding a session's core from what Redis holds (takeover after a crash).

Everything a session needs to go on lives in Redis: config, honest history,
epoch and turn high-water marks, the journal. The model's in-flight turn does
not; ``unfinished_response`` finds it so the client can be told.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from duplex.config import SessionConfig, apply_update
from duplex.conversation import ConversationLimits, ItemBudget
from duplex.events import ServerEvent
from duplex.fence import Fence
from duplex.session import SessionCore
from duplex.store.base import SessionRecord


def config_from_json(text: str) -> SessionConfig:
    """The config saved as a GA ``session`` object (``SessionConfig.wire``)."""
    if not text or text == "{}":
        return SessionConfig()
    wire = json.loads(text)
    wire.pop("id", None)
    wire.pop("object", None)
    wire.pop("type", None)
    return apply_update(SessionConfig(), wire)


def core_from_record(record: SessionRecord, history: Iterable[str], *, beta: bool,
                     limits: ConversationLimits | None = None) -> SessionCore:
    items: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for text in history:
        item = json.loads(text)
        items[item["id"]] = item
    fence = Fence(record.session_id, record.incarnation, record.epoch, record.turn_id)
    budget = ItemBudget(limits or ConversationLimits())
    return SessionCore(fence, config_from_json(record.config), beta=beta, items=items,
                       budget=budget)


def unfinished_response(journal: Iterable[tuple[int, str]]) -> str | None:
    """The id of a response the journal opened but never closed, if any."""
    open_ids: dict[str, None] = {}
    for _, text in journal:
        event = json.loads(text)
        kind = event.get("type")
        if kind == ServerEvent.RESPONSE_CREATED:
            open_ids[event["response"]["id"]] = None
        elif kind == ServerEvent.RESPONSE_DONE:
            open_ids.pop(event["response"]["id"], None)
    return next(reversed(open_ids), None)
