"""``SessionStore`` on Redis: every mutation is one fenced Lua script (I3, I4).

Reads are plain commands (in a MULTI when they need more than one). Every call
runs under one deadline, so a hung server costs at most ``timeout_s``. The
writes a session makes while it streams (journal appends, renewals, history,
epochs, trims, detaches) go through ``WriteBatcher``: one pipeline per loop tick
for every session of the process, each write with its own reply and error.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, cast

import redis.asyncio as aioredis
from redis import exceptions as rx

from duplex.errors import InvalidRequest, SessionStateError
from duplex.events import ServerEvent
from duplex.journal import seq_of, stream_id
from duplex.store import codec, keys
from duplex.store.base import SEQ_PLACEHOLDER, EndState, SessionRecord
from duplex.store.batch import DEFAULT_LIMITS, BatchLimits, WriteBatcher
from duplex.store.client import connect
from duplex.store.fleet import FleetStore

__all__ = ["RedisSessionStore", "connect"]

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


class RedisSessionStore(FleetStore):
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
        super().__init__(client, timeout_s=timeout_s, replica_acks=replica_acks)
        self._ended_ttl_ms = int(ended_ttl_s * 1000)
        self._retained_max_bytes = retained_max_bytes
        self.batch = WriteBatcher(self._nodes, timeout_s=timeout_s, replica_acks=replica_acks,
                                  wait_ms=self._wait_ms, limits=batch_limits)

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
        # Two slots on a cluster, so two scripts: the slot first (admission is exact
        # store-wide), then the session; a session that cannot be made frees it.
        took = await self._durable(
            "open_session", self._s.admit, keys=[keys.ADMITTED, owned],
            args=[sid, owner, codec.ms(now), max_sessions, max_sessions_per_owner])
        try:
            flat: list[str] = await self._durable(
                "open_session", self._s.open, keys=[keys.meta(sid), _leases(sid)],
                args=[sid, owner, token_digest, config, codec.num(now),
                      codec.opt_num(idle_ttl_s), codec.num(grace_s)],
            )
        except (InvalidRequest, SessionStateError):
            if took == 1:
                await self._release(sid, owner=owner)
            raise
        return codec.record(sid, codec.pairs(flat))

    async def renew(self, session_id: str, owner: str, incarnation: int, now: float) -> None:
        sid = keys.checked_id(session_id)
        meta, _, leases = _streaming_keys(sid)
        await self.batch.write("renew", self._s.renew, [meta, leases],
                               [sid, owner, incarnation, codec.num(now)])

    async def close_session(
        self, session_id: str, owner: str, incarnation: int, *, state: EndState = "closed"
    ) -> bool:
        if state not in ("closed", "expired"):
            raise ValueError(f"a session ends closed or expired, not {state!r}")
        sid = keys.checked_id(session_id)
        bucket = keys.bucket_of(sid)
        ended: list[int] = await self._run("close_session", self._script(
            self._s.close, keys=[keys.meta(sid), keys.leases(bucket), keys.expiring(bucket),
                  keys.journal(sid), keys.history(sid), keys.items(sid)],
            args=[sid, owner, incarnation, state, self._ended_ttl_ms],
        ))
        if ended[0] == 1:
            await self._release(sid, size=ended[1])
        elif ended[0] == 0:  # ended already: perhaps by this call, its reply lost
            await self._release(sid)
        return ended[0] == 1

    async def detach(self, session_id: str, generation: int, now: float) -> bool:
        sid = keys.checked_id(session_id)
        started: int = await self.batch.write("detach", self._s.detach,
                                              [keys.meta(sid), _leases(sid)],
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
            "resume", self._s.resume, keys=[keys.meta(sid), _leases(sid)],
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
        live = await self._live_owners(now)
        flat: list[str] = await self._durable(
            "take_over", self._s.take_over, keys=[keys.meta(sid), _leases(sid)],
            args=[sid, owner, codec.num(now), *live],
        )
        # the admission slot follows (a crash before this: reconcile_admitted)
        await self._durable("take_over", self._s.readmit,
                            keys=[keys.ADMITTED, keys.owner_sessions(owner)],
                            args=[sid, owner, keys.OWNER_SESSIONS])
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
        key = keys.meta(sid)
        meta = cast(dict[str, str], await self._run("get", self._node(key).hgetall(key)))
        return codec.record(sid, meta) if meta else None

    async def finish_expiry(self, session_id: str, claimer: str, event_json: str) -> int | None:
        """End a claimed session with one terminal event; its seq, or None if not claimed.

        ``event_json`` holds ``SEQ_PLACEHOLDER``; the script stamps the seq it uses.
        """
        _check_terminal(event_json)
        sid = keys.checked_id(session_id)
        bucket = keys.bucket_of(sid)
        ended: list[int] | None = await self._run("finish_expiry", self._script(
            self._s.finish_expiry,
            keys=[keys.meta(sid), keys.leases(bucket), keys.expiring(bucket), keys.journal(sid),
                  keys.history(sid), keys.items(sid)],
            args=[sid, claimer, event_json, _SEQ_KEY, self._ended_ttl_ms, *_TERMINALS],
        ))
        if ended is None:
            return None
        await self._release(sid, size=ended[1])
        return ended[0]

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
        meta, journal, leases = _streaming_keys(sid)
        last: int = await self.batch.write(
            "append_events", self._s.append_events,
            [meta, journal, leases], args, durable=True, size=size)
        return last

    async def read_journal(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[tuple[int, str]]:
        if after_seq < 0:
            raise InvalidRequest("after_seq must be >= 0", code="invalid_session_resume")
        sid = keys.checked_id(session_id)
        start = "-" if after_seq == 0 else f"({stream_id(after_seq)}"
        key = keys.journal(sid)
        entries = cast(list[tuple[str, dict[str, str]]], await self._run(
            "read_journal", self._node(key).xrange(key, start, "+", count=limit)))
        return [(seq_of(entry_id), fields["event"]) for entry_id, fields in entries]

    async def journal_bounds(self, session_id: str) -> tuple[int | None, int]:
        """(oldest retained seq or ``None``, last seq journaled), read atomically."""
        sid = keys.checked_id(session_id)
        pipe = self._node(keys.meta(sid)).pipeline(transaction=True)
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
            key = keys.meta(sid)
            return int(await self._run("settled_last_seq",
                                       self._node(key).hget(key, "last_seq")) or 0)
        last: int = await self._durable("settled_last_seq", self._s.settled_last_seq,
                                        keys=[keys.meta(sid),
                                              keys.replication_barrier(keys.bucket_of(sid))],
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
        pipe = self._node(keys.meta(sid)).pipeline(transaction=True)
        pipe.lrange(keys.history(sid), 0, -1)
        pipe.hgetall(keys.items(sid))
        ids, items = await self._run("history", pipe.execute())
        return [items[i] for i in ids if i in items]

    # -- connection --------------------------------------------------------------

    async def ping(self) -> None:
        for node in self._nodes.every():
            await self._run("ping", node.ping())

    async def memory(self) -> tuple[int, int]:
        """``(used_memory, maxmemory)`` in bytes (maxmemory 0: no limit; so too
        when the server will not say, e.g. an ACL that denies INFO)."""
        used = limit = 0
        for node in self._nodes.every():  # a cluster: its primaries together
            try:
                info = cast(dict[str, Any], await self._run("memory", node.info("memory")))
            except rx.ResponseError:
                return 0, 0
            used += int(info.get("used_memory", 0))
            limit += int(info.get("maxmemory", 0))
        return used, limit

    async def close(self) -> None:
        await self.batch.close()
        await self._nodes.aclose()


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


def _leases(sid: str) -> str:
    return keys.leases(keys.bucket_of(sid))


@functools.lru_cache(maxsize=4096)
def _streaming_keys(sid: str) -> tuple[str, str, str]:
    """The keys a session's appends and renewals name (meta, journal, its bucket's
    leases), each a CRC of the id and a few calls to build: named once a session,
    not on every write (a few a second a session). Bounded: a few hundred KB."""
    return keys.meta(sid), keys.journal(sid), _leases(sid)
