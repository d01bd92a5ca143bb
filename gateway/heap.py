"""The garbage collector of a gateway process, kept out of the sessions' way.

CPython's collector stops the whole process while it runs, and a full
collection walks every container object it tracks. A gateway process tracks
about 60,000 once started (the modules, the plugin, the app) and a few hundred
more per session. Measured on a worker holding 96-110 sessions
(bench/README.md, "Issue 14, sixth pass"): a full collection took 70-100 ms, so
every session of the process stalled at once, and that pause, not the mean
cost, was what made a busy process miss real time (``stop`` p99 past 100 ms).

- ``settle()``: once the process is ready, what is alive then (the modules, the
  plugin's models, the app) lives as long as the process, so ``gc.freeze()``
  takes it out of every later collection. A full collection then walks the
  sessions' objects alone: still about 0.3 ms a session (45-60 ms at 160-192
  sessions), so full collections are also made rarer: one after every
  ``FULL_AFTER`` collections of the middle generation instead of CPython's 10
  (at 192 sessions: none in 30 s, where there were two). What they would free
  meanwhile is little: cycles that outlive two younger collections (about 500
  objects in 30 s at 192 sessions, once no stage request is a task). It is
  little only while sessions make no cycles: an ended session's state, or a
  refused frame's text held by its error's traceback, would wait here for the
  next full collection (issue 27's soak: a Python heap rising from 57 to
  234 MiB between them). ``tests/inproc/test_no_cycles.py`` holds that; with
  it, the soak's heap stays level (bench/README.md, "No cycles").
- ``PauseTimer``: each collection's pause into a histogram
  (``duplex_gc_pause_seconds{generation}``), so an operator can tell when the
  collector is what stalls a process.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Histogram

log = logging.getLogger("duplex_gateway")

FULL_AFTER = 100  # middle-generation collections before a full one (CPython: 10)


def settle() -> int:
    """Collect what is garbage now, freeze the rest out of the collector's sight
    for good, and space full collections out; the number of objects frozen. For a
    served process, once it is ready: a test process that made apps of its own
    should not call it (what it freezes is never collected, cycles included)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)
    frozen = gc.get_freeze_count()
    log.debug("garbage collector: %d objects alive at readiness frozen", frozen)
    return frozen


class PauseTimer:
    """Times every collection of this process into ``histogram`` (labelled by
    generation) while installed. Collections do not nest, and they run on the
    thread that allocated, so one start time is enough."""

    def __init__(self, histogram: Histogram, clock: Any = time.perf_counter) -> None:
        self._children = [histogram.labels(str(generation)) for generation in range(3)]
        self._clock = clock
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self._clock()
        else:
            self._children[info["generation"]].observe(self._clock() - self._started)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
