"""``SessionStore`` on Redis: every mutation is one fenced Lua script (I3, I4).

Reads are plain commands (in a MULTI when they need more than one). Every call
runs under one deadline, so a hung server costs at most ``timeout_s``. The
writes a session makes while it streams (journal appends, renewals, history,
epochs, trims, detaches) go through ``WriteBatcher``: one pipeline per loop tick
for every session of the process, each write with its own reply and error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.commands.core import AsyncScript

from duplex.errors import InvalidRequest, StoreUnavailable
from duplex.events import ServerEvent
from duplex.journal import seq_of, stream_id
from duplex.store import codec, keys
from duplex.store._scripts import Scripts
from duplex.store.base import SEQ_PLACEHOLDER, EndState, ExpiredClaim, SessionRecord
from duplex.store.batch import DEFAULT_LIMITS, BatchLimits, WriteBatcher
from duplex.store.client import connect, follow_primary
from duplex.store.errors import domain_error

__all__ = ["RedisSessionStore", "connect"]

T = TypeVar("T")

_SEQ_KEY = SEQ_PLACEHOLDER[:-1]  # '"server_event_seq":', the placeholder less its 0
_TERMINALS = (ServerEvent.SESSION_CLOSED.value, ServerEvent.SESSION_EXPIRED.value)


def _check_terminal(event_json: str) -> None:
    """finish_expiry's event holds the placeholder once, as its top-level seq.

    The script substitutes text, not JSON, so a placeholder anywhere else would
    stamp the wrong field; a caller bug, refused before Redis sees it.
    """
    if event_json.count(SEQ_PLACEHOLDER) != 1:
        raise ValueError(f"the terminal event must hold {SEQ_PLACEHOLDER} exactly once")
    probe = json.loads(event_json.replace(SEQ_PLACEHOLDER, _SEQ_KEY + "1"))
    if not isinstance(probe, dict) or probe.get("server_event_seq") != 1:
        raise ValueError(f"{SEQ_PLACEHOLDER} must be the event's own server_event_seq")


class RedisSessionStore:
    """The Redis ``SessionStore``. It owns ``client`` and closes it in ``close()``."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        timeout_s: float | None = 5.0,
        ended_ttl_s: float = 3600.0,
        retained_max_bytes: int = 256 * 1024 * 1024,
        replica_acks: int = 0,
        batch_limits: BatchLimits = DEFAULT_LIMITS,
    ) -> None:
        if replica_acks < 0:
            raise ValueError("replica_acks must be >= 0")
        self._r = client
        self._timeout_s = timeout_s
        self._replica_acks = replica_acks
        # WAIT must answer well inside the operation's own timeout
        self._wait_ms = max(1, int(1000 * (timeout_s or 5.0) / 2))
        self._ended_ttl_ms = int(ended_ttl_s * 1000)
        self._retained_max_bytes = retained_max_bytes
        self._s = Scripts.register(client)
        self.batch = WriteBatcher(client, timeout_s=timeout_s, replica_acks=replica_acks,
                                  wait_ms=self._wait_ms, limits=batch_limits)

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

    async def _durable(self, op: str, script: AsyncScript, keys: list[str],
                       args: list[Any]) -> Any:
        """Run a script whose effect must outlive a failover (a lease grant, a
        journaled event). With ``replica_acks``, WAIT on the same connection until
        that many replicas hold it; fewer means not done, because asynchronous
        replication loses acknowledged writes when the primary fails over
        (research/redis.md §6.3: a fencing epoch went back from 11 to 10)."""
        if not self._replica_acks:
            return await self._run(op, script(keys=keys, args=args))
        pipe = self._r.pipeline(transaction=False)
        await script(keys=keys, args=args, client=pipe)
        pipe.execute_command("WAIT", self._replica_acks, self._wait_ms)
        # raise_on_error would rewrite a script's "CODE message" into "Command # 1 …"
        result, acked = await self._run(op, pipe.execute(raise_on_error=False))
        if isinstance(result, rx.RedisError):
            raise domain_error(op, result)
        if int(acked) < self._replica_acks:
            # perhaps a deposed primary: the retry should reach the new one
            await self._run("follow_primary", follow_primary(self._r))
            raise StoreUnavailable(
                f"{op} reached {acked} of {self._replica_acks} Redis replica(s) within "
                f"{self._wait_ms} ms, so it does not count")
        return result

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
        flat: list[str] = await self._durable(
            "open_session", self._s.open,
            keys=[keys.meta(sid), keys.LEASES, keys.EXPIRING, owned],
            args=[sid, owner, token_digest, config, codec.num(now), max_sessions,
                  max_sessions_per_owner, codec.opt_num(idle_ttl_s), codec.num(grace_s)],
        )
        return codec.record(sid, codec.pairs(flat))

    async def renew(self, session_id: str, owner: str, incarnation: int, now: float) -> None:
        sid = keys.checked_id(session_id)
        await self.batch.write("renew", self._s.renew, [keys.meta(sid), keys.LEASES],
                               [sid, owner, incarnation, codec.num(now)])

    async def close_session(
        self, session_id: str, owner: str, incarnation: int, *, state: EndState = "closed"
    ) -> bool:
        if state not in ("closed", "expired"):
            raise ValueError(f"a session ends closed or expired, not {state!r}")
        sid = keys.checked_id(session_id)
        ended: int = await self._run("close_session", self._s.close(
            keys=[keys.meta(sid), keys.LEASES, keys.EXPIRING, keys.owner_sessions(owner),
                  keys.RETAINED, keys.RETAINED_SIZES,
                  keys.journal(sid), keys.history(sid), keys.items(sid)],
            args=[sid, owner, incarnation, state, self._ended_ttl_ms, self._retained_max_bytes,
                  *keys.SESSION_TEMPLATES],
        ))
        return ended == 1

    async def detach(self, session_id: str, generation: int, now: float) -> bool:
        sid = keys.checked_id(session_id)
        started: int = await self.batch.write("detach", self._s.detach,
                                              [keys.meta(sid), keys.LEASES],
                                              [sid, generation, codec.num(now)])
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
        flat: list[str] = await self._durable(
            "resume", self._s.resume, keys=[keys.meta(sid), keys.LEASES],
            args=[sid, token_digest, expected_generation, new_token_digest, owner,
                  codec.num(now)],
        )
        return codec.record(sid, codec.pairs(flat))

    async def confirm_token(self, session_id: str, generation: int) -> bool:
        """Attachment ``generation`` holds the rotated token: retire the spent one."""
        sid = keys.checked_id(session_id)
        done: int = await self.batch.write("confirm_token", self._s.confirm_token,
                                           [keys.meta(sid)], [generation])
        return bool(done)

    async def take_over(self, session_id: str, new_owner: str, now: float) -> SessionRecord:
        """Own a session whose owner is dead (docs/architecture.md §8); incarnation+1
        fences it out.

        A no-op returning the record when ``new_owner`` owns it already; raises
        ``SessionStateError(session_owned_elsewhere)`` while the owner lives.
        """
        sid = keys.checked_id(session_id)
        owner = keys.checked_id(new_owner, "owner")
        flat: list[str] = await self._durable(
            "take_over", self._s.take_over,
            keys=[keys.meta(sid), keys.LEASES, keys.OWNERS, keys.owner_sessions(owner)],
            args=[sid, owner, codec.num(now), keys.OWNER_SESSIONS],
        )
        return codec.record(sid, codec.pairs(flat))

    async def set_config(
        self, session_id: str, owner: str, incarnation: int, config: str
    ) -> None:
        sid = keys.checked_id(session_id)
        await self.batch.write("set_config", self._s.set_config, [keys.meta(sid)],
                               [owner, incarnation, config], size=len(config))

    async def bump_epoch(
        self, session_id: str, owner: str, incarnation: int, cancelled_epoch: int
    ) -> int:
        sid = keys.checked_id(session_id)
        epoch: int = await self.batch.write("bump_epoch", self._s.bump_epoch, [keys.meta(sid)],
                                            [owner, incarnation, cancelled_epoch],
                                            durable=True)
        return epoch

    async def get(self, session_id: str) -> SessionRecord | None:
        sid = keys.checked_id(session_id)
        # decode_responses=True: replies are str, whatever redis-py's stubs say.
        meta = cast(dict[str, str], await self._run("get", self._r.hgetall(keys.meta(sid))))
        return codec.record(sid, meta) if meta else None

    # -- owner liveness and the reaper --------------------------------------------

    async def heartbeat_owner(self, owner: str, now: float, ttl_s: float,
                              address: str = "") -> None:
        """This process is alive until ``now + ttl_s``; other processes reach it at
        ``address`` (a ws:// URL; empty: it cannot serve their resumes)."""
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        owner = keys.checked_id(owner, "owner")
        pipe = self._r.pipeline(transaction=True)
        # GT keeps a late or re-sent beat from moving the deadline back.
        pipe.zadd(keys.OWNERS, {owner: (now + ttl_s) * 1000}, gt=True)
        if address:
            pipe.hset(keys.OWNER_ADDRESSES, owner, address)
        else:
            pipe.hdel(keys.OWNER_ADDRESSES, owner)
        await self._run("heartbeat_owner", pipe.execute())

    async def owner_alive(self, owner: str, now: float) -> bool:
        """Whether ``owner``'s heartbeat runs past ``now`` (the scripts' rule too)."""
        beat = cast(float | None, await self._run(
            "owner_alive", self._r.zscore(keys.OWNERS, keys.checked_id(owner, "owner"))
        ))
        return beat is not None and beat > now * 1000

    async def owner_address(self, owner: str, now: float) -> str | None:
        """Where ``owner`` is reached, while its heartbeat runs past ``now``."""
        owner = keys.checked_id(owner, "owner")
        pipe = self._r.pipeline(transaction=True)
        pipe.zscore(keys.OWNERS, owner)
        pipe.hget(keys.OWNER_ADDRESSES, owner)
        beat, address = cast(list[Any], await self._run("owner_address", pipe.execute()))
        alive = beat is not None and float(beat) > now * 1000
        return str(address) if alive and address else None

    async def retire_owner(self, owner: str) -> None:
        """Clean shutdown: this process's sessions may be taken over at once."""
        owner = keys.checked_id(owner, "owner")
        pipe = self._r.pipeline(transaction=True)
        pipe.zrem(keys.OWNERS, owner)
        pipe.hdel(keys.OWNER_ADDRESSES, owner)
        await self._run("retire_owner", pipe.execute())

    async def list_owned(self, owner: str) -> list[str]:
        """Session ids holding an admission slot of ``owner``, sorted."""
        owned = cast(set[str], await self._run(
            "list_owned", self._r.smembers(keys.owner_sessions(keys.checked_id(owner, "owner")))
        ))
        return sorted(owned)

    async def claim_expired(
        self, claimer: str, now: float, limit: int = 100, *, claim_ttl_s: float = 30.0
    ) -> list[ExpiredClaim]:
        """Claim overdue sessions: ``(session_id, reason, owner)``, each to one claimer.

        Claimable: by their owner, or by anyone once the owner is dead. A claim
        not ended (``finish_expiry`` or the owner's ``close_session``) within
        ``claim_ttl_s`` is offered again, under the same rule.
        """
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if claim_ttl_s <= 0:
            raise ValueError("claim_ttl_s must be > 0")
        claimer = keys.checked_id(claimer, "owner")
        rows: list[list[str]] = await self._run("claim_expired", self._s.claim_expired(
            keys=[keys.LEASES, keys.EXPIRING, keys.OWNERS],
            args=[claimer, codec.num(now), limit, codec.num(claim_ttl_s), keys.META],
        ))
        return [(sid, reason, owner) for sid, reason, owner in rows]

    async def finish_expiry(self, session_id: str, claimer: str, event_json: str) -> int | None:
        """End a claimed session with one terminal event; its seq, or None if not claimed.

        ``event_json`` holds ``SEQ_PLACEHOLDER``; the script stamps the seq it uses.
        """
        _check_terminal(event_json)
        sid = keys.checked_id(session_id)
        seq: int | None = await self._run("finish_expiry", self._s.finish_expiry(
            keys=[keys.meta(sid), keys.LEASES, keys.EXPIRING, keys.journal(sid),
                  keys.history(sid), keys.items(sid), keys.RETAINED, keys.RETAINED_SIZES],
            args=[sid, claimer, event_json, _SEQ_KEY, self._ended_ttl_ms,
                  keys.OWNER_SESSIONS, self._retained_max_bytes,
                  " ".join(keys.SESSION_TEMPLATES), *_TERMINALS],
        ))
        return seq

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
        trim_upto: int | None = None,
    ) -> int:
        """Journal a contiguous run of events; already journaled seqs are skipped.

        ``now`` also counts as activity (last_activity, lease deadline);
        ``epoch``/``turn_id`` are stored as monotonic high-water marks;
        ``trim_upto`` then drops what ``trim_journal`` would.
        """
        sid = keys.checked_id(session_id)
        args, size = append_args(sid, owner, incarnation, events, max_len=max_len, now=now,
                                 epoch=epoch, turn_id=turn_id, trim_upto=trim_upto)
        last: int = await self.batch.write(
            "append_events", self._s.append_events,
            [keys.meta(sid), keys.journal(sid), keys.LEASES], args, durable=True, size=size)
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

    async def settled_last_seq(self, session_id: str) -> int:
        """An append whose WAIT fell short may still be on this primary, not yet on
        a replica: what it wrote counts only once a WAIT covers it."""
        sid = keys.checked_id(session_id)
        if not self._replica_acks:
            return int(await self._run("settled_last_seq",
                                       self._r.hget(keys.meta(sid), "last_seq")) or 0)
        last: int = await self._durable("settled_last_seq", self._s.settled_last_seq,
                                        keys=[keys.meta(sid), keys.REPLICATION_BARRIER],
                                        args=[])
        return last

    async def trim_journal(self, session_id: str, upto_seq: int) -> None:
        sid = keys.checked_id(session_id)
        await self.batch.write("trim_journal", self._s.trim_journal,
                               [keys.meta(sid), keys.journal(sid)], [upto_seq])

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
        inserted: int = await self.batch.write(
            "history_append", self._s.history_append,
            [keys.meta(sid), keys.history(sid), keys.items(sid)],
            [owner, incarnation, item_id, item_json, previous_item_id or ""],
            size=len(item_json))
        return inserted == 1

    async def history_replace(
        self, session_id: str, owner: str, incarnation: int, item_id: str, item_json: str
    ) -> None:
        sid = keys.checked_id(session_id)
        await self.batch.write("history_replace", self._s.history_replace,
                               [keys.meta(sid), keys.items(sid)],
                               [owner, incarnation, item_id, item_json], size=len(item_json))

    async def history_delete(
        self, session_id: str, owner: str, incarnation: int, item_id: str
    ) -> bool:
        sid = keys.checked_id(session_id)
        removed: int = await self.batch.write(
            "history_delete", self._s.history_delete,
            [keys.meta(sid), keys.history(sid), keys.items(sid)], [owner, incarnation, item_id])
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

    async def memory(self) -> tuple[int, int]:
        """``(used_memory, maxmemory)`` in bytes (maxmemory 0: no limit; so too
        when the server will not say, e.g. an ACL that denies INFO)."""
        try:
            info = cast(dict[str, Any], await self._run("memory", self._r.info("memory")))
        except rx.ResponseError:
            return 0, 0
        return int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))

    async def close(self) -> None:
        await self.batch.close()
        await self._r.aclose()


def append_args(sid: str, owner: str, incarnation: int, events: Sequence[tuple[int, str]], *,
                max_len: int, now: float | None = None, epoch: int | None = None,
                turn_id: int | None = None,
                trim_upto: int | None = None) -> tuple[list[str | int], int]:
    """The arguments of ``append_events.lua`` (built here only: ``bench/capacity.py``
    loads a server with the very calls the store makes), and the events' bytes."""
    if max_len < 1:
        raise ValueError("max_len must be >= 1")
    args: list[str | int] = [
        sid, owner, incarnation, max_len,
        codec.opt_num(now), codec.opt(epoch), codec.opt(turn_id), codec.opt(trim_upto),
    ]
    size = 0
    for seq, event in events:
        args += [stream_id(seq), event]
        size += len(event)
    return args, size
