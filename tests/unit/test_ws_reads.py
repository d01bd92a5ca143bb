"""``DirectReads`` on a real uvicorn server: what ``deliver`` takes skips the ASGI
queue, what it refuses comes through ``receive``, and the order of the messages
holds either way; ``send_text_now`` sends while the socket is open and refuses
once it is not."""

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
    two: asyncio.Event = field(default_factory=asyncio.Event)  # two messages in
    done: asyncio.Event = field(default_factory=asyncio.Event)
    sent_now: list[bool] = field(default_factory=list)  # send_text_now's answers

    def note(self, message: str) -> None:
        self.order.append(message)
        if len(self.order) >= 2:
            self.two.set()


def app_for(seen: Seen, refuse: set[str]) -> Starlette:
    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        protocol = direct_reads(ws)
        seen.protocol.append(protocol)

        def deliver(frame: str | bytes) -> bool:
            message = frame if isinstance(frame, str) else "bytes:" + frame.decode()
            if message in refuse:
                return False
            if message.startswith("say:"):  # answer straight away, as a session's outbox does
                assert protocol is not None
                seen.sent_now += [protocol.send_text_now(f"r{i}")
                                  for i in range(int(message[4:]))]
            seen.note(message)
            seen.direct.append(message)
            return True

        assert protocol is not None
        protocol.deliver = deliver
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                break
            seen.note(msg["text"] if msg.get("text") is not None
                      else "bytes:" + msg["bytes"].decode())
        protocol.deliver = None
        seen.sent_now.append(protocol.send_text_now("late"))  # the peer is gone
        seen.done.set()

    return Starlette(routes=[WebSocketRoute("/", endpoint)])


@pytest.fixture
async def serve() -> AsyncIterator[tuple[Seen, set[str], str]]:
    seen, refuse = Seen(), set[str]()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app_for(seen, refuse), ws=DirectReads, log_config=None,
                            lifespan="off")
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[sock])
    yield seen, refuse, f"ws://127.0.0.1:{sock.getsockname()[1]}/"
    await server.shutdown(sockets=[sock])


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
        await asyncio.wait_for(seen.two.wait(), 5)
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


async def test_send_text_now_sends_in_order_deflated_and_refuses_once_closed(
        serve: tuple[Seen, set[str], str]) -> None:
    seen, _, url = serve
    async with websockets.connect(url) as ws:  # permessage-deflate, as clients offer it
        await ws.send("say:30")
        got = [await asyncio.wait_for(ws.recv(), 5) for _ in range(30)]
    await asyncio.wait_for(seen.done.wait(), 10)
    assert got == [f"r{i}" for i in range(30)]
    assert seen.sent_now == [True] * 30 + [False]
