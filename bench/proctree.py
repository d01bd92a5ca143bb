"""A server's processes, from ``/proc`` (Linux): CPU and memory of a gateway
that may be several processes (``serve --workers N``: a parent and N workers),
kept apart from its embedded ``valkey-server`` child.
"""

from __future__ import annotations

import os

STORE_NAMES = ("valkey-server", "redis-server")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()  # fields from 3 (state) on


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (f := _stat_fields(int(entry))) is not None and int(f[1]) == pid:
            out.append(int(entry))
    return sorted(out)


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def store_child(pid: int) -> int | None:
    """The embedded Valkey under the gateway ``pid``, if it has one."""
    return next((k for k in descendants(pid) if comm(k).startswith(STORE_NAMES)), None)


def server_pids(pid: int, store: int | None) -> list[int]:
    """The gateway's python processes: ``pid`` and its descendants but the store."""
    return [pid] + [k for k in descendants(pid) if k != store]


def ticks(pids: list[int]) -> int | None:
    """utime + stime of ``pids`` (fields 14, 15 of /proc/PID/stat); None if the first
    is gone (a worker that ended meanwhile just stops counting)."""
    total = 0
    for i, pid in enumerate(pids):
        f = _stat_fields(pid)
        if f is None:
            if i == 0:
                return None
            continue
        total += int(f[11]) + int(f[12])
    return total


def memory_kb(pids: list[int], field: str = "VmRSS") -> int:
    """Sum of a /proc/PID/status memory field (VmRSS: resident now; VmHWM: peak)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total
