"""Persistence adapter: the ``SessionStore`` protocol and its Redis implementation.

Layout: ``base`` (protocol, record), ``redis_store`` (the store: a session's
calls), ``fleet`` (what the processes share: heartbeats, admission, the reaper's
sweep), ``calls`` (deadlines, errors, WAIT), ``nodes`` (which primary holds a
key, on a cluster), ``keys`` (the layout: one slot per script), ``batch`` (the
write batcher), ``scripts/`` (one Lua script per mutation), ``client``
(``connect``), ``embedded`` (the
Valkey child process used when no Redis URL is configured), ``dirlock`` (its
data dir's one owner), ``supervisor`` (restarting it when it dies).
"""

from duplex.store.base import SEQ_PLACEHOLDER, SessionRecord, SessionStore, StoreConflict
from duplex.store.client import connect
from duplex.store.embedded import EmbeddedValkey
from duplex.store.redis_store import RedisSessionStore

__all__ = [
    "SEQ_PLACEHOLDER",
    "EmbeddedValkey",
    "RedisSessionStore",
    "SessionRecord",
    "SessionStore",
    "StoreConflict",
    "connect",
]
