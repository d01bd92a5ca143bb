"""A session's history and config writes, in order, held while Redis is away.

The conversation goes on when a history write fails: the write waits here and
goes out, in order, with the next one. Bounded (I8): past ``MAX_UNSAVED`` held
writes the failure is the session's (``StoreUnavailable`` raised).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Sequence

from duplex import effects as fx
from duplex.errors import StoreUnavailable
from duplex.session import SessionCore
from duplex.store.base import SessionStore
from gateway.emitter import Emitter

log = logging.getLogger(__name__)

MAX_UNSAVED = 256  # history/config writes held while Redis is away
Write = fx.SaveItem | fx.ForgetItem | fx.SaveConfig
HELD_WRITES = (fx.SaveItem, fx.ForgetItem, fx.SaveConfig)  # the effects this writes


class HistoryWrites:
    def __init__(self, core: SessionCore, emitter: Emitter, store: SessionStore) -> None:
        self._core, self._emitter, self._store = core, emitter, store
        self._unsaved: deque[Write] = deque()

    async def write(self, effects: Sequence[Write]) -> None:
        """Write ``effects`` in order, after every one held before them."""
        self._unsaved.extend(effects)
        sid = self._core.fence.session_id
        owner, inc = self._emitter.owner, self._emitter.incarnation
        while self._unsaved:
            effect = self._unsaved[0]
            try:
                match effect:
                    case fx.SaveItem():
                        await self._store.history_append(
                            sid, owner, inc, effect.item_id, json.dumps(effect.item),
                            effect.previous_item_id)
                    case fx.ForgetItem():
                        await self._store.history_delete(sid, owner, inc, effect.item_id)
                    case fx.SaveConfig():
                        wire = self._core.config.wire(sid)
                        await self._store.set_config(sid, owner, inc, json.dumps(wire))
            except StoreUnavailable as exc:
                log.warning("session %s: %d history/config writes pending: %s",
                            sid, len(self._unsaved), exc)
                if len(self._unsaved) > MAX_UNSAVED:
                    raise
                return
            self._unsaved.popleft()
