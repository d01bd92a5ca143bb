"""What the carrier tests check alike of a call: how the gateway closed its stream,
that a route is off, and that a second stream went on with the call's one session
(a module of its own: importing from ``conftest`` is ambiguous across test folders)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import websockets
from gateway_process import GatewayProcess
from twilio_helpers import Peek
from websockets.asyncio.client import ClientConnection

from duplex.store import keys


async def assert_closed(ws: ClientConnection, code: int) -> None:
    """The gateway closes ``ws`` with ``code``."""
    await asyncio.wait_for(ws.wait_closed(), 10)
    assert ws.close_code == code


async def assert_route_off(url: str, **connect: Any) -> None:
    """The media-stream upgrade at ``url`` is refused (403): the carrier is off."""
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url, **connect)
    assert refused.value.response.status_code == 403


async def assert_resumed(peek: Peek, call_id: str, carrier: str, sid: str | None) -> None:
    """The call is still bound to ``sid``, created once and never closed: its stream
    resumed the session, neither forked nor ended it."""
    assert await peek.session_of(call_id, carrier) == sid
    types = [e["type"] for e in await peek.journal(str(sid))]
    assert types.count("session.created") == 1 and "session.closed" not in types


async def assert_relayed(peek: Peek, a: GatewayProcess, b: GatewayProcess, carrier: str,
                         call_id: str, sid: str | None, relayed_before: float) -> None:
    """The call's second stream, on ``b``, was relayed to ``a``, the session's owner:
    never taken over, not forked."""
    assert await peek.session_of(call_id, carrier) == sid
    meta = await peek.raw.hgetall(keys.meta(sid))
    assert (meta["owner"], meta["incarnation"]) == (await a.owner(), "1")  # never taken over
    types = [e["type"] for e in await peek.journal(str(sid))]
    assert types.count("session.created") == 1  # not forked
    assert await b.metric("duplex_resumes_relayed_total") == relayed_before + 1


async def assert_ended(peek: Peek, call_id: str, carrier: str, sid: str, reason: str) -> None:
    """The call's session closed once, last, for ``reason``, and the call is forgotten."""
    journal = await peek.journal(sid)
    types = [e["type"] for e in journal]
    assert types.count("session.closed") == 1 and types[-1] == "session.closed"
    assert journal[-1]["reason"] == reason
    assert await peek.session_of(call_id, carrier) is None


async def keys_pressed(peek: Peek, sid: str | None) -> list[str]:
    """The caller's keys, as the session's journal has them."""
    return [e["event"] for e in await peek.journal(str(sid))
            if e["type"] == "input_audio_buffer.dtmf_event_received"]


async def assert_truncated_once(peek: Peek, sid: str | None, floor: float, heard: list[float],
                                sent: float) -> float:
    """The barged-in reply was truncated once: at or after ``floor`` (echoed before the
    barge-in), at most the last point ``heard`` (echoed before the clear), short of
    what was ``sent``. Where, in ms."""
    truncs = [e for e in await peek.journal(str(sid))
              if e["type"] == "conversation.item.truncated"]
    assert len(truncs) == 1
    end_ms: float = truncs[0]["audio_end_ms"]
    assert floor - 1 <= end_ms <= heard[-1]
    assert end_ms < sent  # some was sent, flushed, never heard
    return end_ms
