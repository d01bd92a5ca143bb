"""``duplex-gateway call --turn-detection``: the session asks for the type named
(the browser demo asks for ``semantic_vad``), and without it keeps the gateway's
default, so both clients can be timed under the same turn detection."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from gateway.call_session import hold_call


async def session_update_sent(turn_detection: str | None) -> dict[str, Any]:
    """The ``session.update`` a call with no turns sends to a stand-in gateway."""
    updates: list[dict[str, Any]] = []

    async def gateway(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        async for message in ws:
            updates.append(json.loads(message))

    async with serve(gateway, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        await hold_call(f"ws://127.0.0.1:{port}", [], turn_detection=turn_detection)
    assert [u["type"] for u in updates] == ["session.update", "session.close"], updates
    return updates[0]["session"]


@pytest.mark.parametrize("kind", ["semantic_vad", "server_vad"])
async def test_the_named_turn_detection_is_asked_for(kind: str) -> None:
    listen = (await session_update_sent(kind))["audio"]["input"]
    assert listen["turn_detection"] == {"type": kind}
    assert listen["transcription"] == {"model": "default"}


async def test_without_it_the_gateways_default_is_kept() -> None:
    assert "turn_detection" not in (await session_update_sent(None))["audio"]["input"]
