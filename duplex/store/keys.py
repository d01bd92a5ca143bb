"""Redis key names (docs/architecture.md §5).

All keys of one session carry the hash tag ``{sid}`` so a script touching
them stays on one slot; the owner's set carries ``{owner}``.
"""

from __future__ import annotations

import re

from duplex.errors import InvalidRequest

LEASES = "dg:leases"  # zset: sid -> lease deadline (ms); the reaper's index
# zset: sid -> claim deadline (ms) of sessions a reaper claimed and has not ended
# yet. Admission counts both: a claimed session keeps its slot until it ends.
EXPIRING = "dg:expiring"
OWNERS = "dg:owners"  # zset: process id -> heartbeat deadline (ms)
OWNER_ADDRESSES = "dg:owner_addresses"  # hash: process id -> ws:// URL other processes reach it at
# counter: bumped by settled_last_seq so a WAIT after it covers all earlier writes
REPLICATION_BARRIER = "dg:replication_barrier"

# printf templates, also handed to scripts that derive keys from ids they read
# (Lua's string.format reads them the same way).
META = "dg:{%s}:meta"
OWNER_SESSIONS = "dg:owner:{%s}:sessions"
# every key of one session (meta first), for scripts that drop a retained session
SESSION_TEMPLATES = ("dg:{%s}:meta", "dg:{%s}:journal", "dg:{%s}:history", "dg:{%s}:items")
# ended sessions kept for --ended-session-retention-s: zset sid -> end (ms), and
# hash sid -> bytes (their sum under "*"), bounded by --retained-max-store-bytes
RETAINED = "dg:retained"
RETAINED_SIZES = "dg:retained_sizes"

# Braces would break the hash tag; whitespace and control characters have no
# business in an id (a resume id comes from a URL).
_ID = re.compile(r"[^\s{}\x00-\x1f\x7f]{1,256}")


def checked_id(value: str, what: str = "session id") -> str:
    if not _ID.fullmatch(value):
        code = "invalid_" + what.replace(" ", "_")
        raise InvalidRequest(f"malformed {what}: {value[:40]!r}", code=code)
    return value


def meta(sid: str) -> str:
    return META % sid


def journal(sid: str) -> str:
    return f"dg:{{{sid}}}:journal"


def history(sid: str) -> str:
    return f"dg:{{{sid}}}:history"


def items(sid: str) -> str:
    return f"dg:{{{sid}}}:items"


def owner_sessions(owner: str) -> str:
    return OWNER_SESSIONS % owner


def session_keys(sid: str) -> list[str]:
    """Every per-session key, for expiry on close."""
    return [meta(sid), journal(sid), history(sid), items(sid)]
