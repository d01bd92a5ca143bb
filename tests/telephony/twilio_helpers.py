"""Shared by the telephony tests (a module of its own: ``conftest`` is a name
every test folder shares, so importing from it is ambiguous)."""

from __future__ import annotations

import json
from typing import Any

from duplex.store import RedisSessionStore, connect
from gateway.telephony.calls import call_key

AUTH_TOKEN = "test-auth-token-0123456789abcdef"


class Peek:
    """Reads what the gateway keeps in Redis: call bindings, journals, history."""

    def __init__(self, store: RedisSessionStore, url: str) -> None:
        self.store = store
        self.raw = connect(url)

    async def session_of(self, call_sid: str, carrier: str = "twilio") -> str | None:
        value = await self.raw.get(call_key(call_sid, carrier))
        return json.loads(value)["sid"] if value else None

    async def journal(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(text) for _, text in await self.store.read_journal(sid, 0, 10000)]

    async def history(self, sid: str) -> list[dict[str, Any]]:
        return [json.loads(text) for text in await self.store.history(sid)]
