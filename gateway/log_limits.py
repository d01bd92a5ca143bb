"""Warnings that a peer can trigger at will, rate-limited so a flood is one line.

A client that sends junk, or floods a session, would otherwise write one
WARNING per frame: megabytes of log, and the one line that matters lost in it.
``LogLimiter`` lets the first warning of each kind through, then at most one
per ``every_s`` for that kind, each saying how many like it it held back.
One limiter per socket: a noisy peer cannot silence another one's warnings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_EVERY_S = 10.0
MAX_KINDS = 64  # distinct kinds remembered per limiter (bounded, I8)


@dataclass(slots=True)
class _Window:
    opened_at: float
    held: int = 0


class LogLimiter:
    """At most one ``logger.warning`` per kind per ``every_s``; ``clock`` is injectable."""

    def __init__(self, logger: logging.Logger, *, every_s: float = DEFAULT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self._windows: dict[str, _Window] = {}

    def warning(self, kind: str, msg: str, *args: object,
                exc_info: bool | BaseException = False) -> bool:
        """Log ``msg % args`` unless a ``kind`` warning was logged within ``every_s``
        (then count it); True when it was logged."""
        now = self.clock()
        window = self._windows.get(kind)
        if window is not None and now - window.opened_at < self.every_s:
            window.held += 1
            return False
        held = window.held if window is not None else 0
        if window is None and len(self._windows) >= MAX_KINDS:
            self._windows.pop(next(iter(self._windows)))
        self._windows[kind] = _Window(now)
        if held:
            msg += " (%d more like it since the last, within %.0f s)"
            args = (*args, held, self.every_s)
        self.logger.warning(msg, *args, exc_info=exc_info)
        return True

    def flush(self) -> None:
        """Say what is still held back (when the socket ends), once per kind."""
        for kind, window in self._windows.items():
            if window.held:
                self.logger.warning("%d more %s warnings in the last %.0f s", window.held,
                                    kind, self.every_s)
                window.held = 0
