"""``--ws-compression``: whether a client's offer of permessage-deflate is taken.

Clients built on ``websockets`` (the official ``openai`` SDK among them) offer it
by default; the gateway then compresses every event it sends, reply audio
included. Either way a whole voice turn works and its audio is intact.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from client import RealtimeClient, silence, tone
from gateway_process import GatewayProcess, running_tone
from test_voice_turn import pcm_of

from plugins.tone import decode_turn

STRAIGHT = re.compile(r": (\d+) messages went straight from the socket to the session")


async def _turn_over(gateway: GatewayProcess) -> str | None:
    """One voice turn from a client offering permessage-deflate; the extension the
    gateway agreed to (None: it declined)."""
    c = await RealtimeClient.connect(gateway.ws, compression="deflate")
    try:
        assert (await c.recv())["type"] == "session.created"
        await c.append(tone(1.0))
        await c.append(silence(0.8))
        done = await c.until("response.done")
        assert done["response"]["status"] == "completed"
        audio = pcm_of(c.events, done["response"]["id"])
        assert len(audio) > 24000 // 2 and decode_turn(audio[:4800], 24000) == 1
        extensions: str | None = c.ws.response.headers.get("Sec-WebSocket-Extensions")
        return extensions
    finally:
        await c.close()


async def test_by_default_a_clients_deflate_offer_is_taken(gateway: GatewayProcess) -> None:
    agreed = await _turn_over(gateway)
    assert agreed is not None and "permessage-deflate" in agreed


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_ws_compression_none_declines_it(tmp_path: Path, how: str) -> None:
    args, env = (["--ws-compression", "none"], None) if how == "flag" else \
        ([], {"DUPLEX_GATEWAY_WS_COMPRESSION": "none"})
    with running_tone(tmp_path, "--log-level", "debug", *args, env=env) as gateway:
        assert await _turn_over(gateway) is None
        # and the appends went straight from the socket to the session (DirectReads)
        for _ in range(100):
            counts = [int(m.group(1)) for m in map(STRAIGHT.search, gateway.output) if m]
            if counts:
                break
            await asyncio.sleep(0.05)
        assert counts and counts[0] > 50, gateway.output[-20:]
