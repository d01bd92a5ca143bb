"""``DirectReads`` on a real uvicorn server: what ``deliver`` takes skips the ASGI
queue, what it refuses comes through ``receive``, and the order of the messages
holds either way."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import uvicorn
import websockets
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from gateway.ws_reads import DirectReads, direct_reads


@dataclass
class Seen:
    order: list[str] = field(default_factory=list)  # every message, as the app got it
    direct: list[str] = field(default_factory=list)  # those deliver() took
    protocol: list[DirectReads | None] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)


def app_for(seen: Seen, refuse: set[str]) -> Starlette:
    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        protocol = direct_reads(ws)
        seen.protocol.append(protocol)

        def deliver(text: str | None, data: bytes | None) -> bool:
            message = text if text is not None else "bytes:" + (data or b"").decode()
            if message in refuse:
                return False
            seen.order.append(message)
            seen.direct.append(message)
            return True

        assert protocol is not None
        protocol.deliver = deliver
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            seen.order.append(msg["text"] if msg.get("text") is not None
                              else "bytes:" + msg["bytes"].decode())
            if seen.order[-1] == "slow":
                await asyncio.sleep(0.05)  # messages arriving meanwhile wait their turn
        protocol.deliver = None
        seen.done.set()

    return Starlette(routes=[WebSocketRoute("/", endpoint)])


@pytest.fixture
async def serve() -> AsyncIterator[tuple[Seen, set[str], str]]:
    seen, refuse = Seen(), set[str]()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app_for(seen, refuse), ws=DirectReads,
                                           log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield seen, refuse, f"ws://127.0.0.1:{sock.getsockname()[1]}/"
    server.should_exit = True
    await task


async def test_messages_deliver_takes_skip_the_queue_in_order(
        serve: tuple[Seen, set[str], str]) -> None:
    seen, _, url = serve
    sent = [f"m{i}" for i in range(50)]
    async with websockets.connect(url, compression=None) as ws:
        for m in sent:
            await ws.send(m)
        await ws.send(b"raw")
    await asyncio.wait_for(seen.done.wait(), 10)
    assert seen.order == [*sent, "bytes:raw"]
    assert isinstance(seen.protocol[0], DirectReads)
    assert seen.direct[-1] == "bytes:raw"
    # only what raced the reader's start went through receive()
    assert len(seen.direct) >= 40


async def test_a_refused_message_and_those_behind_it_keep_their_order(
        serve: tuple[Seen, set[str], str]) -> None:
    seen, refuse, url = serve
    refuse.add("slow")
    sent = ["a", "b", "slow", *(f"after{i}" for i in range(20)), "z"]
    async with websockets.connect(url, compression=None) as ws:
        await ws.send("a")
        await ws.send("b")
        while len(seen.order) < 2:
            await asyncio.sleep(0.01)
        for m in sent[2:]:
            await ws.send(m)
    await asyncio.wait_for(seen.done.wait(), 10)
    assert seen.order == sent
    assert "slow" not in seen.direct and seen.direct[:2] == ["a", "b"]


async def test_invalid_utf8_still_closes_1007(serve: tuple[Seen, set[str], str]) -> None:
    seen, _, url = serve
    async with websockets.connect(url, compression=None) as ws:
        await ws.send("fine")
        # a text frame that is not UTF-8, past the client library's own checks
        _send_bad_text(ws)
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1007
    await asyncio.wait_for(seen.done.wait(), 10)
    assert seen.order == ["fine"]


def _send_bad_text(ws: websockets.ClientConnection) -> None:
    from websockets.frames import Frame, Opcode

    ws.protocol.send_frame(Frame(Opcode.TEXT, b"\xff\xfe"))
    ws.send_data()
