"""What the processes sharing a store keep together: their heartbeats, admission
slots, the retained ended sessions (the ``{global}`` slot), and the reaper's sweep
over every bucket (docs/architecture.md §5)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

import redis.asyncio as aioredis

from duplex.store import codec, keys
from duplex.store.base import ExpiredClaim
from duplex.store.calls import StoreCalls

# An admitted session whose meta does not exist yet may be an open in flight: its
# slot is freed by the reconciliation only this long after it was taken.
_ADMIT_GRACE_MS = 60_000
_RECONCILE_BATCH = 200  # admitted entries checked per reaper pass
# what the reaper's pass names (due_buckets.lua builds each index's key)
_EVERY_BUCKET = list(range(keys.BUCKETS))
_EXPIRING, _LEASES = keys.bucket_template("expiring"), keys.bucket_template("leases")


def _named(buckets: list[int]) -> str:
    """The buckets as ``due_buckets.lua`` reads them: "0 1 2 …"."""
    if buckets is _EVERY_BUCKET:
        return _EVERY_BUCKET_NAMED
    return " ".join(map(str, buckets))


_EVERY_BUCKET_NAMED = " ".join(map(str, _EVERY_BUCKET))


class FleetStore(StoreCalls):
    _ended_ttl_ms: int
    _retained_max_bytes: int
    _reconcile_cursor = 0

    # -- owner liveness ------------------------------------------------------------

    async def heartbeat_owner(self, owner: str, now: float, ttl_s: float,
                              address: str = "") -> None:
        """This process is alive until ``now + ttl_s``; other processes reach it at
        ``address`` (a ws:// URL; empty: it cannot serve their resumes)."""
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        owner = keys.checked_id(owner, "owner")
        pipe = self._node(keys.OWNERS).pipeline(transaction=True)
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
            "owner_alive",
            self._node(keys.OWNERS).zscore(keys.OWNERS, keys.checked_id(owner, "owner"))))
        return beat is not None and beat > now * 1000

    async def _live_owners(self, now: float) -> list[str]:
        """The owners whose heartbeat runs past ``now``, for the scripts that may act
        on a dead owner's sessions (they cannot read the ``{global}`` slot)."""
        live = await self._run("owners", self._node(keys.OWNERS).zrangebyscore(
            keys.OWNERS, f"({codec.num(now * 1000)}", "+inf"))
        return cast(list[str], live)

    async def owner_address(self, owner: str, now: float) -> str | None:
        """Where ``owner`` is reached, while its heartbeat runs past ``now``."""
        owner = keys.checked_id(owner, "owner")
        pipe = self._node(keys.OWNERS).pipeline(transaction=True)
        pipe.zscore(keys.OWNERS, owner)
        pipe.hget(keys.OWNER_ADDRESSES, owner)
        beat, address = cast(list[Any], await self._run("owner_address", pipe.execute()))
        alive = beat is not None and float(beat) > now * 1000
        return str(address) if alive and address else None

    async def retire_owner(self, owner: str) -> None:
        """Clean shutdown: this process's sessions may be taken over at once."""
        owner = keys.checked_id(owner, "owner")
        pipe = self._node(keys.OWNERS).pipeline(transaction=True)
        pipe.zrem(keys.OWNERS, owner)
        pipe.hdel(keys.OWNER_ADDRESSES, owner)
        await self._run("retire_owner", pipe.execute())

    # -- admission slots and retained sessions ------------------------------------------

    async def list_owned(self, owner: str) -> list[str]:
        """Session ids holding an admission slot of ``owner``, sorted."""
        key = keys.owner_sessions(keys.checked_id(owner, "owner"))
        owned = cast(set[str], await self._run("list_owned", self._node(key).smembers(key)))
        return sorted(owned)

    async def _release(self, sid: str, *, owner: str = "", size: int | None = None) -> None:
        """Free ``sid``'s admission slot (only ``owner``'s, when given); an ended
        session of ``size`` bytes joins the retained ones, whose oldest may have to
        go for the budget: their keys are deleted here, slot by slot."""
        dropped = cast(list[str], await self._run("release", self._script(
            self._s.release, keys=[keys.ADMITTED, keys.RETAINED, keys.RETAINED_SIZES],
            args=[sid, owner, "" if size is None else size, self._ended_ttl_ms,
                  self._retained_max_bytes, keys.OWNER_SESSIONS])))
        for old in dropped:
            await self._run("release", self._script(self._s.forget, keys.session_keys(old), []))

    async def _reconcile_admitted(self, now: float) -> None:
        """Mend admission slots a crash left behind: one ended or never made (the
        process died between a session's script and its ``{global}`` one), or
        still on the owner a take-over replaced. A slice per reaper pass."""
        admitted = self._node(keys.ADMITTED)
        cursor, held = cast(tuple[int, dict[str, str]], await self._run(
            "reconcile", admitted.hscan(keys.ADMITTED, self._reconcile_cursor,
                                        count=_RECONCILE_BATCH)))
        self._reconcile_cursor = int(cursor)
        if not held:
            return
        metas = await self._per_node("reconcile", [
            (keys.meta(sid), ("HMGET", keys.meta(sid), "state", "owner")) for sid in held])
        for (sid, value), (state, owner) in zip(held.items(), metas, strict=True):
            since, _, holder = value.partition(":")
            if state in ("open", "expiring") and owner != holder:
                await self._run("reconcile", self._script(
                    self._s.readmit, [keys.ADMITTED, keys.owner_sessions(owner)],
                    [sid, owner, keys.OWNER_SESSIONS]))
            elif state in ("closed", "expired") or (
                    state is None and int(since) + _ADMIT_GRACE_MS < now * 1000):
                await self._release(sid, owner=holder)

    async def _per_node(self, op: str, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run ``(key, command)`` pairs, one pipeline per primary; replies in order."""
        groups: dict[int, list[int]] = defaultdict(list)
        clients: dict[int, aioredis.Redis] = {}
        for i, (key, _) in enumerate(calls):
            node = self._node(key)
            groups[id(node)].append(i)
            clients[id(node)] = node
        replies: list[Any] = [None] * len(calls)
        for group, members in groups.items():
            pipe = clients[group].pipeline(transaction=False)
            for i in members:
                pipe.execute_command(*calls[i][1])
            for i, reply in zip(members, await self._run(op, pipe.execute()), strict=True):
                replies[i] = reply
        return replies

    async def _due(self, due: str, limit: int) -> list[tuple[int, int, list[str]]]:
        """Every bucket's members due by ``due`` (ms), with their scores: ``(bucket,
        kind, [member, score, …])`` for each index with some (kind 0: the expiring
        index, 1: the leases). One call per primary (``due_buckets.lua``), whatever
        the number of buckets."""
        found: list[tuple[int, int, list[str]]] = []
        for client, buckets in self._buckets_by_node():
            rows = await self._run("claim_expired", self._s.due_buckets(
                keys=[keys.leases(buckets[0])],
                args=[due, limit, _EXPIRING, _LEASES, _named(buckets)], client=client))
            found += zip(rows[::3], rows[1::3], rows[2::3], strict=True)
        return found

    def _buckets_by_node(self) -> list[tuple[aioredis.Redis, list[int]]]:
        """The buckets each primary holds (one server: all of them)."""
        if not self._nodes.clustered:
            return [(self._node(keys.leases(0)), _EVERY_BUCKET)]
        groups: dict[int, list[int]] = defaultdict(list)
        clients: dict[int, aioredis.Redis] = {}
        for b in _EVERY_BUCKET:
            node = self._node(keys.leases(b))
            groups[id(node)].append(b)
            clients[id(node)] = node
        return [(clients[group], buckets) for group, buckets in groups.items()]

    # -- the reaper -------------------------------------------------------------------

    async def claim_expired(
        self, claimer: str, now: float, limit: int = 100, *, claim_ttl_s: float = 30.0
    ) -> list[ExpiredClaim]:
        """Claim overdue sessions: ``(session_id, reason, owner)``, each to one claimer.

        Claimable: by their owner, or by anyone once the owner is dead. A claim
        not ended (``finish_expiry`` or the owner's ``close_session``) within
        ``claim_ttl_s`` is offered again, under the same rule. Every bucket is
        looked at (one pipeline per primary); only those with something due run
        the claim script.
        """
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if claim_ttl_s <= 0:
            raise ValueError("claim_ttl_s must be > 0")
        claimer = keys.checked_id(claimer, "owner")
        await self._reconcile_admitted(now)
        due = codec.num(now * 1000)
        # the `limit` most overdue, every bucket together: how many to claim in each;
        # abandoned claims (kind 0) first: the oldest work
        candidates = sorted(
            (kind, float(score), bucket)
            for bucket, kind, row in await self._due(due, limit)
            for score in row[1::2])[:limit]
        if not candidates:
            return []
        wanted: dict[int, int] = defaultdict(int)
        for _, _, bucket in candidates:
            wanted[bucket] += 1
        live = await self._live_owners(now)
        claims: list[ExpiredClaim] = []
        for b, n in wanted.items():
            rows: list[list[str]] = await self._run("claim_expired", self._script(
                self._s.claim_expired, keys=[keys.leases(b), keys.expiring(b)],
                args=[claimer, codec.num(now), n, codec.num(claim_ttl_s),
                      keys.meta_template(b), *live]))
            claims += [(sid, reason, owner) for sid, reason, owner in rows]
        return claims
