"""Redis key names (docs/architecture.md §5): every script touches one hash slot.

A Valkey/Redis Cluster refuses a script whose keys lie in more than one slot, so
the layout is the same on one primary and on a cluster:

- a session's keys carry the hash tag of its **bucket** (``{b042}``: one of
  ``BUCKETS``, from a stable hash of the session id), and so do the bucket's
  indexes (leases, claims, the replication barrier): open, append, renew, close,
  claim and take-over touch the session and its bucket's indexes in one slot;
- what has to be counted or read store-wide (admission, owners' heartbeats and
  addresses, the retained ended sessions) carries the tag ``{global}``: one slot,
  touched by opens, ends and heartbeats, never by a session's streaming writes.

A bucket is a unit of the reaper's sweep, not of capacity: ``BUCKETS`` only has to
spread sessions evenly over a cluster's primaries (256 tags over 16384 slots).
"""

from __future__ import annotations

import re
import zlib

from duplex.errors import InvalidRequest

BUCKETS = 256  # fixed: every gateway on one store must agree on a session's bucket

# -- store-wide, one slot ({global}) ---------------------------------------------------
# hash: sid -> "<admitted at ms>:<owner>" of every session holding a --max-sessions slot
ADMITTED = "dg:{global}:admitted"
OWNERS = "dg:{global}:owners"  # zset: process id -> heartbeat deadline (ms)
OWNER_ADDRESSES = "dg:{global}:owner_addresses"  # hash: process id -> ws:// URL
# set of the sids holding a slot of one owner (the per-process limit); printf template
OWNER_SESSIONS = "dg:{global}:owner:%s:sessions"
# ended sessions kept for --ended-session-retention-s: zset sid -> end (ms), and
# hash sid -> bytes (their sum under "*"), bounded by --retained-max-store-bytes
RETAINED = "dg:{global}:retained"
RETAINED_SIZES = "dg:{global}:retained_sizes"

# -- per session and per bucket, one slot per bucket -----------------------------------
# printf templates of a session's keys once its bucket tag is in: "dg:{b042}:%s:meta"
SESSION_SUFFIXES = ("meta", "journal", "history", "items")

# Braces would break the hash tag; whitespace and control characters have no
# business in an id (a resume id comes from a URL).
_ID = re.compile(r"[^\s{}\x00-\x1f\x7f]{1,256}")


def checked_id(value: str, what: str = "session id") -> str:
    if not _ID.fullmatch(value):
        code = "invalid_" + what.replace(" ", "_")
        raise InvalidRequest(f"malformed {what}: {value[:40]!r}", code=code)
    return value


def bucket_of(sid: str) -> int:
    """The session's bucket: CRC-32 of its id (stable across processes and
    versions, unlike ``hash()``), modulo ``BUCKETS``."""
    return zlib.crc32(sid.encode()) % BUCKETS


def tag(bucket: int) -> str:
    if not 0 <= bucket < BUCKETS:
        raise ValueError(f"bucket {bucket} is not in 0..{BUCKETS - 1}")
    return f"{{b{bucket:03d}}}"


def session_key(sid: str, suffix: str) -> str:
    return f"dg:{tag(bucket_of(sid))}:{sid}:{suffix}"


def meta(sid: str) -> str:
    return session_key(sid, "meta")


def journal(sid: str) -> str:
    return session_key(sid, "journal")


def history(sid: str) -> str:
    return session_key(sid, "history")


def items(sid: str) -> str:
    return session_key(sid, "items")


def session_keys(sid: str) -> list[str]:
    """Every per-session key, meta first."""
    return [session_key(sid, suffix) for suffix in SESSION_SUFFIXES]


def meta_template(bucket: int) -> str:
    """The printf name of a meta key in ``bucket``, for scripts that read ids."""
    return f"dg:{tag(bucket)}:%s:meta"


def leases(bucket: int) -> str:
    """zset: sid -> lease deadline (ms) of the bucket's open sessions; the reaper's index."""
    return f"dg:{tag(bucket)}:leases"


def expiring(bucket: int) -> str:
    """zset: sid -> claim deadline (ms) of the bucket's sessions a reaper claimed and
    has not ended yet."""
    return f"dg:{tag(bucket)}:expiring"


def bucket_template(suffix: str) -> str:
    """A bucket index's printf name, the bucket as ``%03d`` (``leases``: what
    ``leases(b)`` names), for a script that names many buckets' indexes itself."""
    return "dg:{b%03d}:" + suffix


def replication_barrier(bucket: int) -> str:
    """Counter bumped by settled_last_seq so a WAIT after it covers every earlier
    write on the bucket's primary."""
    return f"dg:{tag(bucket)}:replication_barrier"


def owner_sessions(owner: str) -> str:
    return OWNER_SESSIONS % owner
