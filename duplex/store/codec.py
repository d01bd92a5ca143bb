"""Between Python values and the strings a Redis hash holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from duplex.store.base import SessionRecord


def num(value: float) -> str:
    """A float as text Lua's ``tonumber`` reads back exactly."""
    return repr(float(value))


def ms(seconds: float) -> str:
    """Seconds as whole milliseconds."""
    return str(round(seconds * 1000))


def opt(value: int | None) -> str:
    """``None`` travels as the empty string."""
    return "" if value is None else str(value)


def opt_num(value: float | None) -> str:
    return "" if value is None else num(value)


def pairs(flat: Sequence[str]) -> dict[str, str]:
    """A flat ``HGETALL`` reply from a script as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def record(session_id: str, meta: Mapping[str, str]) -> SessionRecord:
    detached = meta.get("detached_at", "")
    idle = meta.get("idle_ttl_s", "")
    return SessionRecord(
        session_id=session_id,
        owner=meta["owner"],
        incarnation=int(meta["incarnation"]),
        epoch=int(meta["epoch"]),
        turn_id=int(meta["turn_id"]),
        generation=int(meta["generation"]),
        last_seq=int(meta["last_seq"]),
        state=meta["state"],
        config=meta["config"],
        resume_token_digest=meta["resume_token_digest"],
        created_at=float(meta["created_at"]),
        last_activity=float(meta["last_activity"]),
        detached_at=float(detached) if detached else None,
        grace_s=float(meta.get("grace_s") or 0.0),
        idle_ttl_s=float(idle) if idle else None,
        recovery_token_digest=meta.get("recovery_digest", ""),
    )
