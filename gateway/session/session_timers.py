"""A session's two clocks: its lifetime (``--max-session-s``, from when it
opened, across takeovers) and the idle timeout after a reply
(``idle_timeout_ms``, ``duplex.idle``). Each one, when it runs out, queues an
item for the session's worker: the worker, not the timer, acts on it, in order
with everything else the session has to do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from duplex import effects as fx
from gateway.session import runner_items as ri
from gateway.session.mailbox import Lane, Mailbox


class SessionTimers:
    def __init__(self, mailbox: Mailbox) -> None:
        self._mailbox = mailbox
        self._lifetime: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None
        self.reply_audio_at: float | None = None  # loop time of the reply's first audio

    def start_lifetime(self, opened_at: float | None, max_session_s: float | None,
                       expire: Callable[[], None]) -> None:
        if not max_session_s or opened_at is None:
            return
        left = max(0.0, opened_at + max_session_s - time.time())
        self._lifetime = asyncio.get_running_loop().call_later(left, expire)

    def reply_started(self) -> None:
        self.reply_audio_at = None

    def reply_audio(self) -> None:
        self.reply_audio_at = asyncio.get_running_loop().time()

    def start_idle(self, timer: fx.IdleTimer) -> None:
        """``idle_ms`` after the reply's audio has played (it plays from its first
        chunk on, at real time), or from now when it had none; a newer timer
        replaces this one."""
        loop = asyncio.get_running_loop()
        played = loop.time()
        if self.reply_audio_at is not None and timer.playback_ms:
            played = max(played, self.reply_audio_at + timer.playback_ms / 1000.0)
        if self._idle is not None:
            self._idle.cancel()
        self._idle = loop.call_at(played + timer.idle_ms / 1000.0, self._elapsed, timer.token)

    def _elapsed(self, token: int) -> None:
        # behind the commands already queued, and never refused: it must be heard
        self._mailbox.put_ahead(Lane.CONTROL, ri.IdleElapsed(token), of=lambda _: False,
                                refusable=False)

    def cancel(self) -> None:
        for timer in (self._lifetime, self._idle):
            if timer is not None:
                timer.cancel()
