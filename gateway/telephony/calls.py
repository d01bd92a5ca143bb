"""Call → session binding in Redis, so a second socket for a call resumes it.

``dg:{carrier}:call:{call id}`` (Twilio's: ``dg:twilio:call:{callSid}``) holds
the session id and its current resume token, for as long as the session can
live (``--max-session-s``, a day where sessions never end, plus the disconnect
grace). The first socket sets it with NX; later sockets read it and resume.
``dg:{carrier}:secret`` is the carrier's stream-token key where no credential of
the carrier's derives one.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from duplex.errors import StoreUnavailable


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

    def __init__(self, client: aioredis.Redis, ttl_s: float, carrier: str) -> None:
        self._r = client
        self._ttl_ms = max(1000, int(ttl_s * 1000))
        self.carrier = carrier

    async def get(self, call_sid: str) -> Binding | None:
        try:
            raw = await self._r.get(call_key(call_sid, self.carrier))
        except RedisError as exc:
            raise StoreUnavailable(f"call binding not read: {exc}") from exc
        if not raw:
            return None
        data = json.loads(raw)
        return Binding(str(data["sid"]), str(data["token"]))

    async def put(self, call_sid: str, binding: Binding, *, only_new: bool) -> bool:
        """Store ``binding``; with ``only_new`` only if the call has none (False then)."""
        value = json.dumps({"sid": binding.session_id, "token": binding.resume_token})
        try:
            done = await self._r.set(call_key(call_sid, self.carrier), value, px=self._ttl_ms,
                                     nx=only_new)
        except RedisError as exc:
            raise StoreUnavailable(f"call binding not written: {exc}") from exc
        return bool(done)

    async def touch(self, call_sid: str) -> None:
        try:
            await self._r.pexpire(call_key(call_sid, self.carrier), self._ttl_ms)
        except RedisError:
            pass  # the next touch retries; the binding only matters for a second socket

    async def drop(self, call_sid: str) -> None:
        try:
            await self._r.delete(call_key(call_sid, self.carrier))
        except RedisError:
            pass  # it expires with the session's TTL anyway

    async def shared_secret(self) -> bytes:
        """One random key for every gateway on this Redis: the first one to ask
        makes it (SET NX), the others read it, so a stream token minted by one
        process is accepted by another."""
        try:
            key = secret_key(self.carrier)
            await self._r.set(key, secrets.token_hex(32), nx=True)
            value = await self._r.get(key)
        except RedisError as exc:
            raise StoreUnavailable(f"stream-token key not read: {exc}") from exc
        return bytes.fromhex(str(value))
