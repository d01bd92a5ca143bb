"""A session's history and config writes, in order, held while Redis is away.

The conversation goes on when a history write fails: the write waits here and
goes out, in order, with the next one. Bounded (I8): past ``MAX_UNSAVED`` held
writes the failure is the session's (``StoreUnavailable`` raised).

Nothing a client hears waits on these writes, so the runner makes them while
the events journaled next are (``publish_with``): both wait on Redis together,
in one pipeline.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from duplex import effects as fx
from duplex.errors import StoreUnavailable
from duplex.session import SessionCore
from duplex.store.base import SessionStore
from gateway.session.emitter import Emitter

log = logging.getLogger(__name__)

MAX_UNSAVED = 256  # history/config writes held while Redis is away
Write = fx.SaveItem | fx.ForgetItem | fx.SaveConfig  # the effects this writes


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

    async def publish_with(self, batch: list[dict[str, Any]], held: Sequence[Write]) -> None:
        """Publish ``batch`` while the writes ``held`` are made: the two wait on Redis
        together (a turn's commit, its transcript and a barge-in each made two round
        trips, one after the other)."""
        if not held:
            if batch:
                await self._emitter.publish(batch)
            return
        if not batch:
            await self.write(held)
            return
        saving = asyncio.ensure_future(self.write(held))
        try:
            await self._emitter.publish(batch)
        except BaseException:
            saving.cancel()  # the lease is lost or the worker stops: a held write waits
            saving.add_done_callback(_retrieved)
            raise
        await saving


def _retrieved(task: asyncio.Future[None]) -> None:
    """A task given up on: its error, if it had one, is not worth a warning."""
    if not task.cancelled():
        task.exception()
