"""Call → session binding in Redis, so a second socket for a call resumes it.

``dg:{carrier}:call:{call id}`` (Twilio's: ``dg:twilio:call:{callSid}``) holds
the session id and its current resume token, for as long as the session can
live (``--max-session-s``, a day where sessions never end, plus the disconnect
grace). The first socket sets it with NX; later sockets read it and resume.
``dg:{carrier}:secret`` is the carrier's stream-token key where no credential of
the carrier's derives one. Each is one key, so on a Valkey/Redis Cluster each
command goes to the primary that holds its slot (``Nodes``), as the store's do.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from duplex.errors import StoreUnavailable
from duplex.store.nodes import Nodes


def call_key(call_sid: str, carrier: str) -> str:
    return f"dg:{carrier}:call:{call_sid}"


def secret_key(carrier: str) -> str:
    return f"dg:{carrier}:secret"


@dataclass(frozen=True, slots=True)
class Binding:
    session_id: str
    resume_token: str


class CallRegistry:
    """One carrier's calls and their sessions."""

    def __init__(self, nodes: Nodes, ttl_s: float, carrier: str) -> None:
        self._nodes = nodes
        self._ttl_ms = max(1000, int(ttl_s * 1000))
        self.carrier = carrier

    async def _on(self, key: str) -> aioredis.Redis:
        """The server that holds ``key`` (asking the cluster's map once, or again
        after a command found it stale)."""
        try:
            await self._nodes.discover()
        except RedisError as exc:
            raise StoreUnavailable(f"the store did not answer: {exc}") from exc
        return self._nodes.for_key(key)

    def _heard(self, exc: RedisError) -> None:
        self._nodes.heard(exc)  # MOVED, a node gone: the map is asked again next time

    async def get(self, call_sid: str) -> Binding | None:
        key = call_key(call_sid, self.carrier)
        try:
            raw = await (await self._on(key)).get(key)
        except RedisError as exc:
            self._heard(exc)
            raise StoreUnavailable(f"call binding not read: {exc}") from exc
        if not raw:
            return None
        data = json.loads(raw)
        return Binding(str(data["sid"]), str(data["token"]))

    async def put(self, call_sid: str, binding: Binding, *, only_new: bool) -> bool:
        """Store ``binding``; with ``only_new`` only if the call has none (False then)."""
        value = json.dumps({"sid": binding.session_id, "token": binding.resume_token})
        key = call_key(call_sid, self.carrier)
        try:
            done = await (await self._on(key)).set(key, value, px=self._ttl_ms, nx=only_new)
        except RedisError as exc:
            self._heard(exc)
            raise StoreUnavailable(f"call binding not written: {exc}") from exc
        return bool(done)

    async def touch(self, call_sid: str) -> None:
        key = call_key(call_sid, self.carrier)
        try:
            await (await self._on(key)).pexpire(key, self._ttl_ms)
        except StoreUnavailable:
            pass  # the next touch retries
        except RedisError as exc:
            self._heard(exc)  # the next touch retries; the binding only matters for a second socket

    async def drop(self, call_sid: str) -> None:
        key = call_key(call_sid, self.carrier)
        try:
            await (await self._on(key)).delete(key)
        except StoreUnavailable:
            pass  # it expires with the session's TTL anyway
        except RedisError as exc:
            self._heard(exc)  # it expires with the session's TTL anyway

    async def shared_secret(self) -> bytes:
        """One random key for every gateway on this Redis: the first one to ask
        makes it (SET NX), the others read it, so a stream token minted by one
        process is accepted by another."""
        key = secret_key(self.carrier)
        try:
            node = await self._on(key)
            await node.set(key, secrets.token_hex(32), nx=True)
            value = await node.get(key)
        except RedisError as exc:
            self._heard(exc)
            raise StoreUnavailable(f"stream-token key not read: {exc}") from exc
        return bytes.fromhex(str(value))
