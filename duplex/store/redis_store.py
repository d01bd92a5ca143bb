"""``SessionStore`` on Redis: every mutation is one fenced Lua script (I3, I4).

Reads are plain commands (in a MULTI when they need more than one). Every call
runs under one deadline, so a hung server costs at most ``timeout_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar, cast

import redis.asyncio as aioredis
from redis import exceptions as rx

from duplex.errors import InvalidRequest, StoreUnavailable
from duplex.journal import seq_of, stream_id
from duplex.store import codec, keys
from duplex.store._scripts import Scripts
from duplex.store.base import EndState, SessionRecord
from duplex.store.client import connect
from duplex.store.errors import domain_error

__all__ = ["RedisSessionStore", "connect"]

T = TypeVar("T")


class RedisSessionStore:
    """The Redis ``SessionStore``. It owns ``client`` and closes it in ``close()``."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        timeout_s: float | None = 5.0,
        ended_ttl_s: float = 3600.0,
    ) -> None:
        self._r = client
        self._timeout_s = timeout_s
        self._ended_ttl_ms = int(ended_ttl_s * 1000)
        self._s = Scripts.register(client)

    async def _run(self, op: str, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"Redis did not answer {op} within {self._timeout_s} s"
            ) from exc
        except rx.RedisError as exc:
            raise domain_error(op, exc) from exc

    # -- lifecycle ---------------------------------------------------------------

    async def open_session(
        self,
        session_id: str,
        *,
        owner: str,
        token_digest: str,
        config: str,
        now: float,
        max_sessions: int,
        max_sessions_per_owner: int,
        idle_ttl_s: float | None,
        grace_s: float,
    ) -> SessionRecord:
        sid = keys.checked_id(session_id)
        owned = keys.owner_sessions(keys.checked_id(owner, "owner"))
        flat: list[str] = await self._run("open_session", self._s.open(
            keys=[keys.meta(sid), keys.LEASES, owned],
            args=[sid, owner, token_digest, config, codec.num(now), max_sessions,
                  max_sessions_per_owner, codec.opt_num(idle_ttl_s), codec.num(grace_s)],
        ))
        return codec.record(sid, codec.pairs(flat))

    async def renew(self, session_id: str, owner: str, incarnation: int, now: float) -> None:
        sid = keys.checked_id(session_id)
        await self._run("renew", self._s.renew(
            keys=[keys.meta(sid), keys.LEASES], args=[sid, owner, incarnation, codec.num(now)]
        ))

    async def close_session(
        self, session_id: str, owner: str, incarnation: int, *, state: EndState = "closed"
    ) -> bool:
        if state not in ("closed", "expired"):
            raise ValueError(f"a session ends closed or expired, not {state!r}")
        sid = keys.checked_id(session_id)
        ended: int = await self._run("close_session", self._s.close(
            keys=[keys.meta(sid), keys.LEASES, keys.owner_sessions(owner),
                  keys.journal(sid), keys.history(sid), keys.items(sid)],
            args=[sid, owner, incarnation, state, self._ended_ttl_ms],
        ))
        return ended == 1

    async def detach(self, session_id: str, generation: int, now: float) -> bool:
        sid = keys.checked_id(session_id)
        started: int = await self._run("detach", self._s.detach(
            keys=[keys.meta(sid), keys.LEASES], args=[sid, generation, codec.num(now)]
        ))
        return started == 1

    async def resume(
        self,
        session_id: str,
        token_digest: str,
        expected_generation: int,
        new_token_digest: str,
        owner: str,
        now: float,
    ) -> SessionRecord:
        sid = keys.checked_id(session_id)
        flat: list[str] = await self._run("resume", self._s.resume(
            keys=[keys.meta(sid), keys.LEASES],
            args=[sid, token_digest, expected_generation, new_token_digest, owner,
                  codec.num(now)],
        ))
        return codec.record(sid, codec.pairs(flat))

    async def bump_epoch(
        self, session_id: str, owner: str, incarnation: int, cancelled_epoch: int
    ) -> int:
        sid = keys.checked_id(session_id)
        epoch: int = await self._run("bump_epoch", self._s.bump_epoch(
            keys=[keys.meta(sid)], args=[owner, incarnation, cancelled_epoch]
        ))
        return epoch

    async def get(self, session_id: str) -> SessionRecord | None:
        sid = keys.checked_id(session_id)
        # decode_responses=True: replies are str, whatever redis-py's stubs say.
        meta = cast(dict[str, str], await self._run("get", self._r.hgetall(keys.meta(sid))))
        return codec.record(sid, meta) if meta else None

    # -- journal (I4) ------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        owner: str,
        incarnation: int,
        events: Sequence[tuple[int, str]],
        *,
        max_len: int,
        now: float | None = None,
        epoch: int | None = None,
        turn_id: int | None = None,
    ) -> int:
        """Journal a contiguous run of events; already journaled seqs are skipped.

        ``now`` also counts as activity (last_activity, lease deadline);
        ``epoch``/``turn_id`` are stored as monotonic high-water marks.
        """
        if max_len < 1:
            raise ValueError("max_len must be >= 1")
        sid = keys.checked_id(session_id)
        args: list[str | int] = [
            sid, owner, incarnation, max_len,
            codec.opt_num(now), codec.opt(epoch), codec.opt(turn_id),
        ]
        for seq, event in events:
            args += [stream_id(seq), event]
        last: int = await self._run("append_events", self._s.append_events(
            keys=[keys.meta(sid), keys.journal(sid), keys.LEASES], args=args
        ))
        return last

    async def read_journal(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[tuple[int, str]]:
        if after_seq < 0:
            raise InvalidRequest("after_seq must be >= 0", code="invalid_session_resume")
        sid = keys.checked_id(session_id)
        start = "-" if after_seq == 0 else f"({stream_id(after_seq)}"
        entries = cast(list[tuple[str, dict[str, str]]], await self._run(
            "read_journal", self._r.xrange(keys.journal(sid), start, "+", count=limit)
        ))
        return [(seq_of(entry_id), fields["event"]) for entry_id, fields in entries]

    async def journal_bounds(self, session_id: str) -> tuple[int | None, int]:
        """(oldest retained seq or ``None``, last seq journaled), read atomically."""
        sid = keys.checked_id(session_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.xrange(keys.journal(sid), "-", "+", count=1)
        pipe.hget(keys.meta(sid), "last_seq")
        first, last = await self._run("journal_bounds", pipe.execute())
        oldest = seq_of(first[0][0]) if first else None
        return oldest, int(last or 0)

    async def trim_journal(self, session_id: str, upto_seq: int) -> None:
        sid = keys.checked_id(session_id)
        await self._run("trim_journal", self._s.trim_journal(
            keys=[keys.meta(sid), keys.journal(sid)], args=[upto_seq]
        ))

    # -- conversation history (I6) -----------------------------------------------

    async def history_append(
        self,
        session_id: str,
        owner: str,
        incarnation: int,
        item_id: str,
        item_json: str,
        previous_item_id: str | None = None,
    ) -> bool:
        """Insert after ``previous_item_id`` (``None``: at the end; ``"root"``: first).

        True when the item is new; an existing id only has its JSON replaced.
        """
        sid = keys.checked_id(session_id)
        inserted: int = await self._run("history_append", self._s.history_append(
            keys=[keys.meta(sid), keys.history(sid), keys.items(sid)],
            args=[owner, incarnation, item_id, item_json, previous_item_id or ""],
        ))
        return inserted == 1

    async def history_replace(
        self, session_id: str, owner: str, incarnation: int, item_id: str, item_json: str
    ) -> None:
        sid = keys.checked_id(session_id)
        await self._run("history_replace", self._s.history_replace(
            keys=[keys.meta(sid), keys.items(sid)], args=[owner, incarnation, item_id, item_json]
        ))

    async def history_delete(
        self, session_id: str, owner: str, incarnation: int, item_id: str
    ) -> bool:
        sid = keys.checked_id(session_id)
        removed: int = await self._run("history_delete", self._s.history_delete(
            keys=[keys.meta(sid), keys.history(sid), keys.items(sid)],
            args=[owner, incarnation, item_id],
        ))
        return removed == 1

    async def history(self, session_id: str) -> list[str]:
        """Item JSON texts in conversation order."""
        sid = keys.checked_id(session_id)
        pipe = self._r.pipeline(transaction=True)
        pipe.lrange(keys.history(sid), 0, -1)
        pipe.hgetall(keys.items(sid))
        ids, items = await self._run("history", pipe.execute())
        return [items[i] for i in ids if i in items]

    # -- connection --------------------------------------------------------------

    async def ping(self) -> None:
        await self._run("ping", self._r.ping())

    async def close(self) -> None:
        await self._r.aclose()
