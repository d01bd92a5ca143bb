"""The bench-started gateway's own ``/metrics``, read around a run: how often its
garbage collector stalled it (``duplex_gc_pause_seconds``, gateway/heap.py).

With ``--workers N`` each worker answers ``/metrics`` for itself at its relay
address (docs/deployment.md "Every core"), so every worker is read and the counts summed.
"""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

WORKER_READY = re.compile(r"duplex-gateway worker \d+ ready: pid \d+, relays at \w+://(\S+)")
LONG_PAUSE_S = 0.025  # a bucket bound of duplex_gc_pause_seconds


def addresses(output: list[str], shared: str) -> list[str]:
    """Where each gateway process answers ``/metrics``: every worker's relay address
    (from its ready line), or the one process's ``shared`` host:port."""
    workers = [m.group(1) for line in output if (m := WORKER_READY.search(line))]
    return workers or [shared]


def long_pauses(at: list[str]) -> int | None:
    """Collector pauses of at least ``LONG_PAUSE_S`` so far, all processes and
    generations together; None when a process did not answer."""
    total = 0
    for address in at:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
                text = reply.read().decode()
        except OSError:
            return None
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "duplex_gc_pause_seconds_count":
                    total += int(s.value)
                elif (s.name == "duplex_gc_pause_seconds_bucket"
                      and float(s.labels["le"]) == LONG_PAUSE_S):
                    total -= int(s.value)
    return total
