"""A small real WebSocket client for the realtime protocol, with audio helpers."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

RATE = 24000
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"

# every event any RealtimeClient received, with its dialect, until the conformance
# check (conftest.py) takes them: ``received.clear()`` after each test
received: list[tuple[str, dict[str, Any]]] = []


def dialect_of(connect_kwargs: dict[str, Any]) -> str:
    """``beta`` when the connection asks for OpenAI's beta protocol, as the gateway
    reads it (the ``OpenAI-Beta: realtime=v1`` header or the beta subprotocol)."""
    headers = connect_kwargs.get("additional_headers") or {}
    items = headers.items() if isinstance(headers, dict) else headers
    asked = any(k.lower() == "openai-beta" and "realtime=v1" in v for k, v in items)
    return "beta" if asked or BETA_SUBPROTOCOL in (connect_kwargs.get("subprotocols")
                                                   or ()) else "ga"


def tone(seconds: float, freq: float = 440.0, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(RATE * seconds), dtype=np.int16)


def b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


class RealtimeClient:
    def __init__(self, ws: ClientConnection, dialect: str = "ga") -> None:
        self.ws = ws
        self.dialect = dialect
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> RealtimeClient:
        return cls(await websockets.connect(url, max_size=None, **kwargs), dialect_of(kwargs))

    async def close(self) -> None:
        await self.ws.close()

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def append(self, pcm: np.ndarray, frame_ms: int = 20) -> None:
        step = RATE * frame_ms // 1000
        for start in range(0, len(pcm), step):
            await self.send("input_audio_buffer.append", audio=b64(pcm[start:start + step]))

    async def stream(self, pcm: np.ndarray, frame_ms: int = 20) -> None:
        """``append`` at the pace of speech: frame *i* goes at start + *i* frames
        (a microphone, not a file upload)."""
        loop = asyncio.get_running_loop()
        step = RATE * frame_ms // 1000
        t0 = loop.time()
        for i, start in enumerate(range(0, len(pcm), step)):
            await asyncio.sleep(max(0.0, t0 + i * frame_ms / 1000 - loop.time()))
            await self.send("input_audio_buffer.append", audio=b64(pcm[start:start + step]))

    async def recv(self, timeout: float = 15.0) -> dict[str, Any]:
        event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        received.append((self.dialect, event))
        return event

    async def until(self, type_: str, timeout: float = 15.0, **match: Any) -> dict[str, Any]:
        """Read events until one of ``type_`` (with fields equal to ``match``) arrives."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = await self.recv(max(0.01, deadline - loop.time()))
            if event["type"] == type_ and all(event.get(k) == v for k, v in match.items()):
                return event

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]


# -- helpers for the error-path, operations and compatibility tests -----------------

# ``error.type`` values of OpenAI's API errors.
OPENAI_ERROR_TYPES = frozenset({
    "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
    "rate_limit_error", "server_error",
})


def reply_pcm(events: list[dict[str, Any]], response_id: str) -> np.ndarray:
    """The PCM16 24 kHz audio of one response's ``response.output_audio.delta`` events."""
    chunks = [np.frombuffer(base64.b64decode(e["delta"]), dtype="<i2") for e in events
              if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)


async def speak(c: RealtimeClient, seconds: float = 1.0, freq: float = 440.0) -> None:
    """A tone, then enough silence for server VAD to end the turn."""
    await c.append(tone(seconds, freq))
    await c.append(silence(0.8))


async def expect_error(c: RealtimeClient, code: str, timeout: float = 5.0) -> dict[str, Any]:
    """The next ``error`` event; it must carry ``code`` and an OpenAI error type."""
    event = await c.until("error", timeout)
    assert event["error"]["code"] == code, event
    assert event["error"]["type"] in OPENAI_ERROR_TYPES, event
    assert isinstance(event["error"]["message"], str) and event["error"]["message"], event
    return event


_probes = 0


async def still_works(c: RealtimeClient, timeout: float = 5.0) -> dict[str, Any]:
    """Prove the connection still serves commands: a user text item comes back added.

    Fails on any ``error`` event that arrives before the item does.
    """
    global _probes
    _probes += 1
    item_id = f"item_probe{_probes}"
    text = f"probe {_probes}"
    await c.send("conversation.item.create", event_id=f"evt_probe{_probes}", item={
        "id": item_id, "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": text}]})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await c.recv(max(0.01, deadline - loop.time()))
        assert event["type"] != "error", event
        if event["type"] == "conversation.item.added" and event["item"]["id"] == item_id:
            assert event["item"]["role"] == "user"
            assert event["item"]["content"][0]["text"] == text
            return event


# -- helpers for the resume and expiry tests --------------------------------------

from collections.abc import Awaitable, Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TypeVar  # noqa: E402

import redis.asyncio as aioredis  # noqa: E402

from duplex.store import keys  # noqa: E402

T = TypeVar("T")


async def resume(url: str, sid: str, token: str, cursor: int, *,
                 ssl: Any = None, **fields: Any) -> RealtimeClient:
    """Open ``url?resume=<sid>`` and send ``session.resume`` as the first message
    (``ssl``: what a ``wss://`` URL trusts)."""
    c = await (RealtimeClient.connect(f"{url}?resume={sid}", ssl=ssl) if ssl is not None
               else RealtimeClient.connect(f"{url}?resume={sid}"))
    await c.send("session.resume", resume_token=token,
                 last_received_server_event_seq=cursor, **fields)
    return c


def last_seq(events: list[dict[str, Any]]) -> int:
    """The highest ``server_event_seq`` among ``events`` (0 when none has one)."""
    return max((e["server_event_seq"] for e in events if "server_event_seq" in e), default=0)


TERMINALS = ("session.closed", "session.expired")


def valkey(data_dir: Path) -> aioredis.Redis:
    """A client of a test gateway's embedded Valkey, to look at what it stored."""
    return aioredis.Redis(unix_socket_path=str(data_dir / "valkey" / "valkey.sock"),
                          decode_responses=True)


async def journal(r: aioredis.Redis, session_id: str) -> list[dict[str, Any]]:
    """The session's journaled server events, oldest first."""
    entries: list[tuple[str, dict[str, str]]] = await r.xrange(  # type: ignore[assignment]
        keys.journal(session_id))
    return [json.loads(fields["event"]) for _, fields in entries]


async def meta(r: aioredis.Redis, session_id: str) -> dict[str, str]:
    found: dict[str, str] = await r.hgetall(  # type: ignore[assignment]
        keys.meta(session_id))
    return found


async def detached(r: aioredis.Redis, session_id: str, timeout: float = 5.0) -> dict[str, str]:
    """Once the session is detached (its grace running): its meta."""
    async def check() -> dict[str, str] | None:
        m = await meta(r, session_id)
        return m if m.get("detached_at") else None

    return await eventually(check, timeout, f"session {session_id} is detached")


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float,
                     what: str) -> T:
    """Poll ``check`` (every 20 ms) until it returns something truthy, for at most
    ``timeout`` seconds: a bounded wait for state that has no event of its own."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)
