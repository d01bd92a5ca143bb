"""Keeps the embedded Valkey running: a watcher thread restarts it when it exits.

The thread blocks in ``waitpid`` on the server, so an exit is noticed at once and
the server reaped (no zombie). It restarts the server on the same data dir,
socket and AOF after a backoff: 0.1 s, doubling while the server keeps dying, at
most 5 s, back to 0.1 s once a run lasted 10 s. A restart that fails is retried
on the same backoff, for ever; ``/healthz`` is what tells a process supervisor
that it has gone on too long. Clients need nothing: redis-py reconnects on its
next command (``duplex.store.client``), and the leases and journals come back
from the AOF.

A thread, not an asyncio task: ``PR_SET_PDEATHSIG`` ties each server to the
thread that forked it, and this thread lives exactly as long as the supervision;
the event loop does not (and may be busy when the server dies).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from duplex.errors import StoreUnavailable
from duplex.store.embedded import EmbeddedValkey

log = logging.getLogger("duplex.store")


@dataclass(frozen=True, slots=True)
class Restart:
    old_pid: int | None
    status: int | None  # Popen's returncode: -N when killed by signal N
    new_pid: int | None
    took_s: float  # from the exit being noticed to the new server answering PING
    count: int  # restarts so far, this one included


def describe(status: int | None) -> str:
    if status is None:
        return "exited"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


class Supervisor:
    """Watches one started ``EmbeddedValkey`` from ``start()`` until ``stop()``.

    ``on_restart`` callbacks run on the watcher thread after each restart.
    """

    def __init__(self, server: EmbeddedValkey, *, first_delay_s: float = 0.1,
                 max_delay_s: float = 5.0, stable_s: float = 10.0) -> None:
        self.server = server
        self.on_restart: list[Callable[[Restart], None]] = []
        self.restarts = 0
        self._first_delay_s = first_delay_s
        self._max_delay_s = max_delay_s
        self._stable_s = stable_s
        self._stopping = threading.Event()
        # held while (re)starting or stopping the server, so stop() never races a restart
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def watching(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        log.info("embedded Valkey pid %s on %s", self.server.pid, self.server.url)
        self._thread = threading.Thread(target=self._watch, name="valkey-supervisor",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching, then stop the server (it flushes its AOF)."""
        self._stopping.set()
        with self._lock:
            self.server.stop(timeout_s)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _watch(self) -> None:
        delay = self._first_delay_s
        while not self._stopping.is_set():
            up_since, pid = time.monotonic(), self.server.pid
            status = self.server.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - up_since >= self._stable_s:
                delay = self._first_delay_s
            delay = self._restart(pid, status, delay)

    def _restart(self, pid: int | None, status: int | None, delay: float) -> float:
        """Start the server again, retrying on backoff; the delay for next time."""
        noticed = time.monotonic()
        while not self._stopping.wait(delay):
            try:
                with self._lock:
                    if self._stopping.is_set():
                        break
                    self.server.start()
            except (StoreUnavailable, OSError) as exc:  # OSError: the binary cannot run
                delay = min(2 * delay, self._max_delay_s)
                log.error("embedded Valkey pid %s %s and does not start again (next try "
                          "in %.3g s): %s", pid, describe(status), delay, exc)
                continue
            self.restarts += 1
            event = Restart(pid, status, self.server.pid, time.monotonic() - noticed,
                            self.restarts)
            log.warning("embedded Valkey pid %s %s; restarted it on the same AOF as pid %s "
                        "in %.2f s (restart %d)", pid, describe(status), event.new_pid,
                        event.took_s, event.count)
            for callback in self.on_restart:
                callback(event)
            break
        return min(2 * delay, self._max_delay_s)
