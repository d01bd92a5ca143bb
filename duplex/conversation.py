"""Bounds on a conversation (I8): how many items and how many bytes of words.

A session's conversation grows with every turn and every item a client adds;
unbounded, one client can fill Redis and the gateway's memory. Two rules:

- an item a client adds (``conversation.item.create``) that would take the
  conversation past a bound is refused with ``conversation_full`` and changes
  nothing: the client decides what to delete;
- items the conversation itself makes (a committed turn, a reply) always go in,
  and the oldest items make room for them (each one's deletion is an event),
  so a long voice conversation never stops, it forgets its beginning.

Size is counted as the store keeps an item: the bytes of its JSON text (every
field a client gave, not just its words: an item's extra fields or audio are
kept too) plus a fixed cost per item (what it takes in Redis beyond its text).

A session's share of the store (``--session-max-store-bytes``) is split in two
halves: one for its journal (``gateway.session.journal``), one for what the
client keeps, its config and its conversation together (``session_bytes``). A
client's item past that share is refused with ``session_store_full``, as a
``session.update`` is (``duplex.session``); the conversation's own items make
room within it by forgetting the oldest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from duplex.errors import InvalidRequest

ITEM_OVERHEAD = 256  # bytes an item costs in Redis beyond its JSON text


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    max_items: int = 1000
    max_bytes: int = 2 * 1024 * 1024
    # the config and the conversation together: the client's half of the
    # session's share of the store (--session-max-store-bytes)
    session_bytes: int = 8 * 1024 * 1024


def item_size(item: Mapping[str, Any]) -> int:
    """Bytes ``item`` holds in the store: its JSON text as the store gets it
    (ASCII-escaped: a byte a character) and the fixed cost."""
    return ITEM_OVERHEAD + len(json.dumps(item))


@dataclass(slots=True)
class ItemBudget:
    limits: ConversationLimits = field(default_factory=ConversationLimits)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int = 0
    config_bytes: int = 0  # the session's config, as stored: it shares session_bytes

    def set(self, item_id: str, item: Mapping[str, Any]) -> None:
        """Count ``item`` (new, or resized: a transcript came, a truncation)."""
        size = item_size(item)
        self.total += size - self.sizes.get(item_id, 0)
        self.sizes[item_id] = size

    def drop(self, item_id: str) -> None:
        self.total -= self.sizes.pop(item_id, 0)

    @property
    def byte_bound(self) -> int:
        """Bytes the conversation may hold: its own bound, or what the config leaves
        of the session's share, whichever is less."""
        return min(self.limits.max_bytes, self.limits.session_bytes - self.config_bytes)

    def refusal(self, item: Mapping[str, Any]) -> str | None:
        """Why one more item like ``item`` does not fit (``conversation_full``: the
        conversation's bounds; ``session_store_full``: the session's share), or None."""
        size = self.total + item_size(item)
        if len(self.sizes) >= self.limits.max_items or size > self.limits.max_bytes:
            return "conversation_full"
        if size + self.config_bytes > self.limits.session_bytes:
            return "session_store_full"
        return None

    def set_config(self, size: int) -> None:
        """Count a config of ``size`` bytes, or refuse it (``session_store_full``) when
        it does not fit beside the conversation: nothing changes then."""
        if size + self.total > self.limits.session_bytes:
            raise InvalidRequest(
                f"the session's store is full: this config ({size} bytes) and the "
                f"conversation ({self.total} bytes) may hold {self.limits.session_bytes} "
                "bytes together: delete conversation items or send a smaller config",
                code="session_store_full", param="session")
        self.config_bytes = size

    def evictions(self, oldest_first: Iterable[str], keep: str | None = None) -> list[str]:
        """The oldest items to forget until the conversation is within its bounds
        (never ``keep``, the item just added)."""
        count, total, out, bound = len(self.sizes), self.total, [], self.byte_bound
        for item_id in oldest_first:
            if count <= self.limits.max_items and total <= bound:
                break
            if item_id == keep or item_id not in self.sizes:
                continue
            out.append(item_id)
            count -= 1
            total -= self.sizes[item_id]
        return out
