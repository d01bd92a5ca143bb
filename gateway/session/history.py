"""A session's history and config writes, in order, held while Redis is away.

The conversation goes on when a history write fails: the write waits here and
goes out, in order, with the next one. Bounded (I8): past ``MAX_UNSAVED`` held
writes the failure is the session's (``StoreUnavailable`` raised).

Nothing a client hears waits on these writes, so the outbox makes them while
the events journaled next are (``Outbox.publish``): both wait on Redis
together, in one pipeline.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from duplex import effects as fx
from duplex.errors import StoreUnavailable
from duplex.store.base import SessionStore
from gateway.session.journal import Ownership

log = logging.getLogger(__name__)

MAX_UNSAVED = 256  # history/config writes held while Redis is away


@dataclass(frozen=True, slots=True)
class SaveConfig:
    """The session's config as it is now (``SessionConfig.wire``), to keep."""

    wire: dict[str, Any]


Write = fx.SaveItem | fx.ForgetItem | SaveConfig


class HistoryWrites:
    def __init__(self, store: SessionStore, ownership: Ownership) -> None:
        self._store, self._ownership = store, ownership
        self._unsaved: deque[Write] = deque()

    async def write(self, writes: Sequence[Write]) -> None:
        """Write ``writes`` in order, after every one held before them."""
        self._unsaved.extend(writes)
        sid, owner, inc = self._ownership.session_id, self._ownership.owner, \
            self._ownership.incarnation
        while self._unsaved:
            write = self._unsaved[0]
            try:
                match write:
                    case fx.SaveItem():
                        await self._store.history_append(
                            sid, owner, inc, write.item_id, json.dumps(write.item),
                            write.previous_item_id)
                    case fx.ForgetItem():
                        await self._store.history_delete(sid, owner, inc, write.item_id)
                    case SaveConfig():
                        await self._store.set_config(sid, owner, inc, json.dumps(write.wire))
            except StoreUnavailable as exc:
                log.warning("session %s: %d history/config writes pending: %s",
                            sid, len(self._unsaved), exc)
                if len(self._unsaved) > MAX_UNSAVED:
                    raise
                return
            self._unsaved.popleft()
