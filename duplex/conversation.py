"""Bounds on a conversation (I8): how many items and how many bytes of words.

A session's conversation grows with every turn and every item a client adds;
unbounded, one client can fill Redis and the gateway's memory. Two rules:

- an item a client adds (``conversation.item.create``) that would take the
  conversation past a bound is refused with ``conversation_full`` and changes
  nothing: the client decides what to delete;
- items the conversation itself makes (a committed turn, a reply) always go in,
  and the oldest items make room for them (each one's deletion is an event),
  so a long voice conversation never stops, it forgets its beginning.

Size is counted in UTF-8 bytes of an item's words plus a fixed cost per item
(what it takes in Redis apart from its words).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from duplex.events import item_text

ITEM_OVERHEAD = 256  # bytes an item costs beyond its words (ids, JSON, Redis)


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    max_items: int = 1000
    max_bytes: int = 2 * 1024 * 1024


def item_size(item: Mapping[str, Any]) -> int:
    return ITEM_OVERHEAD + len(item_text(item).encode("utf-8", "replace"))


@dataclass(slots=True)
class ItemBudget:
    limits: ConversationLimits = field(default_factory=ConversationLimits)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def set(self, item_id: str, item: Mapping[str, Any]) -> None:
        """Count ``item`` (new, or resized: a transcript came, a truncation)."""
        size = item_size(item)
        self.total += size - self.sizes.get(item_id, 0)
        self.sizes[item_id] = size

    def drop(self, item_id: str) -> None:
        self.total -= self.sizes.pop(item_id, 0)

    def room_for(self, item: Mapping[str, Any]) -> bool:
        """Whether one more item like ``item`` stays within both bounds."""
        return (len(self.sizes) < self.limits.max_items
                and self.total + item_size(item) <= self.limits.max_bytes)

    def evictions(self, oldest_first: Iterable[str], keep: str | None = None) -> list[str]:
        """The oldest items to forget until the conversation is within its bounds
        (never ``keep``, the item just added)."""
        count, total, out = len(self.sizes), self.total, []
        for item_id in oldest_first:
            if count <= self.limits.max_items and total <= self.limits.max_bytes:
                break
            if item_id == keep or item_id not in self.sizes:
                continue
            out.append(item_id)
            count -= 1
            total -= self.sizes[item_id]
        return out
