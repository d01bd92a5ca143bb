"""Ends of sessions that the store did not take, retried until it does (issue 27).

A session ends on this process first (its terminal said, its runner gone) and in
the store second (``close.lua``). When the store is away for the second step,
the session is still open there, owned by this live process: a resume would
take it back. So the end is kept here and retried, with backoff, until the
store answers; meanwhile the gateway refuses every resume of it as it refuses
an ended session's (``Gateway.resume_session``), and a resume that reaches
another gateway is relayed here, the owner, and refused the same way.

The retry is safe to repeat and cannot harm a session that moved on: ``close.lua``
ends only an open session (or one this process claimed for expiry itself) and
only under the owner and incarnation the end was meant for; another answer (the
session ended already, its keys are gone, another process took it over) ends
the retry too. Nothing bounds it but the store's answer or this process's stop,
where each end gets one last try: an attached session has no deadline in the
store, so an end given up on would leave it open for good. The ends held are at
most the sessions this process served when the store went away.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from duplex.errors import DuplexError, StoreUnavailable
from duplex.store.base import EndState, SessionStore
from gateway.session.journal import Ownership

log = logging.getLogger(__name__)

FIRST_RETRY_S = 0.25
MAX_RETRY_S = 5.0  # a store back from an outage hears of the end within this


@dataclass(frozen=True, slots=True)
class _End:
    ownership: Ownership
    state: EndState


class PendingEnds:
    def __init__(self, store: SessionStore, *, first_retry_s: float = FIRST_RETRY_S,
                 max_retry_s: float = MAX_RETRY_S) -> None:
        self._store = store
        self._first_s = first_retry_s
        self._max_s = max_retry_s
        self._retries: dict[str, tuple[_End, asyncio.Task[None]]] = {}

    def __contains__(self, session_id: object) -> bool:
        """Whether ``session_id`` ended here while the store has yet to hear of it."""
        return session_id in self._retries

    def __len__(self) -> int:
        return len(self._retries)

    def keep(self, ownership: Ownership, state: EndState) -> None:
        """Retry ending ``ownership``'s session as ``state`` until the store answers."""
        sid = ownership.session_id
        if sid in self._retries:
            return
        end = _End(ownership, state)
        task = asyncio.get_running_loop().create_task(self._retry(end), name=f"end {sid}")
        self._retries[sid] = end, task
        task.add_done_callback(lambda _: self._retries.pop(sid, None))

    async def _retry(self, end: _End) -> None:
        delay_s, tries = self._first_s, 0
        while True:
            await asyncio.sleep(delay_s)
            tries += 1
            if await self._end(end):
                log.info("session %s: close persisted after %d retries",
                         end.ownership.session_id, tries)
                return
            delay_s = min(2 * delay_s, self._max_s)

    async def _end(self, end: _End) -> bool:
        """One try; True once the store has answered."""
        o = end.ownership
        try:
            await self._store.close_session(o.session_id, o.owner, o.incarnation,
                                            state=end.state)
        except StoreUnavailable as exc:
            log.debug("session %s: close not persisted yet: %s", o.session_id, exc)
            return False
        except DuplexError as exc:  # another process owns it now: its end to make
            log.warning("session %s: close not persisted: %s", o.session_id, exc)
        return True

    async def stop(self) -> None:
        """This process stops: one last try at each end still held, then none."""
        retries, self._retries = self._retries, {}
        for _, task in retries.values():
            task.cancel()
        await asyncio.gather(*(task for _, task in retries.values()), return_exceptions=True)
        await asyncio.gather(*(self._end(end) for end, _ in retries.values()))
