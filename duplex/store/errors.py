"""Redis failures as domain errors.

Scripts fail with ``redis.error_reply("CODE message")``; the code picks the
domain error. Connection trouble of any kind is ``StoreUnavailable``.
"""

from __future__ import annotations

from collections.abc import Callable

from redis import exceptions as rx

from duplex.errors import (
    CapacityError,
    DuplexError,
    InvalidRequest,
    LeaseLost,
    SessionStateError,
    StoreUnavailable,
)
from duplex.store.base import StoreConflict

_BY_CODE: dict[str, Callable[[str], DuplexError]] = {
    "LEASE_LOST": lambda m: LeaseLost(m),
    "NO_SESSION": lambda m: SessionStateError(m, code="session_not_found"),
    "SESSION_CLOSED": lambda m: SessionStateError(m, code="session_closed"),
    "SESSION_EXISTS": lambda m: SessionStateError(m, code="session_exists"),
    "CAPACITY": lambda m: CapacityError(m, code="resource_exhausted"),
    "RESUME_CONFLICT": lambda m: SessionStateError(m, code="session_resume_conflict"),
    "BAD_TOKEN": lambda m: InvalidRequest(m, code="invalid_resume_token", param="resume_token"),
    "ITEM_NOT_FOUND": lambda m: InvalidRequest(m, code="item_not_found"),
    "EPOCH_AHEAD": lambda m: StoreConflict(m, code="epoch_ahead"),
    "JOURNAL_GAP": lambda m: StoreConflict(m, code="journal_gap"),
    "OWNER_ALIVE": lambda m: SessionStateError(m, code="session_owned_elsewhere"),
    "BAD_EVENT": lambda m: InvalidRequest(m, code="invalid_request"),
}

# Replies that mean "this server cannot serve now" (failover, memory, a stuck
# script, a cluster slot that moved or is moving), not "your call is wrong".
# LOADING is already a ConnectionError.
_UNAVAILABLE = (rx.ReadOnlyError, rx.OutOfMemoryError, rx.ClusterDownError, rx.TryAgainError,
                rx.AskError)
_UNAVAILABLE_CODES = ("NOREPLICAS", "BUSY")


def domain_error(op: str, exc: rx.RedisError) -> Exception:
    """The error to raise for a failed store call; unknown replies pass through."""
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError)):
        return StoreUnavailable(f"Redis unreachable during {op}: {exc or type(exc).__name__}")
    text = str(exc)
    code, _, message = text.partition(" ")
    # Valkey/Redis 7 append " script: on @user_script:N." to errors raised in Lua.
    message = message.split(" script: ", 1)[0]
    make = _BY_CODE.get(code)
    if make is not None:
        return make(message)
    if isinstance(exc, _UNAVAILABLE) or code in _UNAVAILABLE_CODES:
        return StoreUnavailable(f"Redis cannot serve {op}: {text}")
    return exc
