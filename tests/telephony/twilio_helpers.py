"""Shared by the telephony tests and tests/cluster's call (a module of its own:
``conftest`` is a name every test folder shares, so importing from it is
ambiguous)."""

from __future__ import annotations

import json
from typing import Any

from twilio_emulator import Emulator, mark_ms, ulaw_silence, ulaw_tone

from duplex.store import RedisSessionStore, connect
from gateway.telephony.calls import call_key

AUTH_TOKEN = "test-auth-token-0123456789abcdef"
WORD_MS = 200  # the tone plugin speaks each word as 200 ms of tone


async def say_turn(em: Emulator) -> None:
    """One user turn: a second of tone, then silence long enough for the VAD to end it."""
    await em.speak(ulaw_tone(1.0) + ulaw_silence(0.8))


async def hear_reply(em: Emulator, turn: int, ms: float) -> str:
    """Wait until ``ms`` of the reply to ``turn`` has played; return its response id."""
    await em.until(lambda: len(em.response_ids()) >= turn)
    rid = em.response_ids()[turn - 1]
    await em.until(lambda: any(mark_ms(n) >= ms - 1 for n in em.played_marks
                               if n.startswith(rid + ":")))
    return rid


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
