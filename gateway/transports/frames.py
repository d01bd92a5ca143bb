"""One socket's frames, in and out: the one way a transport reads and sends.

Where the gateway's own uvicorn serves the socket, a frame can reach the session
straight from the parser, inside uvicorn's ``data_received``, with no task wake-up
and no ASGI queue round (``gateway.ws_reads``: about 10 % of the relay's CPU);
elsewhere (a test's in-memory socket, another ASGI server) every frame comes
through Starlette's ``receive``. The frame source decides which: a reader hands
``pump`` one synchronous ``take`` and one asynchronous ``handle`` and never sees
how a frame arrived.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from duplex.close_codes import CloseCode
from gateway import sockets
from gateway.transports.codec import Frame
from gateway.ws_reads import direct_reads

# A frame taken now, synchronously (from the socket's parser where it can be);
# False: not now, it goes to ``Handle``, which may wait. ``take`` must not block.
Take = Callable[[Frame], bool]
Handle = Callable[[Frame], Awaitable[bool]]  # False: stop reading


class Frames(Protocol):
    """A socket as a stream of frames."""

    close_code: int  # how the peer closed it, once ``receive`` returned None
    close_reason: str

    @property
    def delivered(self) -> int:
        """Frames ``take`` got straight from the parser (for the log and the tests)."""
        ...

    async def receive(self) -> Frame | None:
        """The next frame, as a handshake reads it; None once the peer has gone."""
        ...

    async def pump(self, take: Take, handle: Handle) -> None:
        """Every frame, in order, until the peer goes or ``handle`` says stop: each
        is offered to ``take`` first; those it declines go to ``handle``. ``handle``
        may wait only while ``take`` declines everything (the order holds)."""
        ...

    async def send(self, frame: Frame) -> None:
        """Send one frame; raises when the peer has gone."""
        ...

    async def close(self, code: int, reason: str = "") -> None:
        """Close with a close frame the peer can read (``gateway.sockets.close``)."""
        ...


class SocketFrames:
    """A Starlette WebSocket's frames, through uvicorn's fast path where it serves it."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self._direct = direct_reads(ws)
        self.close_code = int(CloseCode.ABNORMAL)
        self.close_reason = ""

    @property
    def delivered(self) -> int:
        return self._direct.delivered if self._direct is not None else 0

    @property
    def direct(self) -> bool:
        """Frames can arrive straight from the parser."""
        return self._direct is not None

    async def receive(self) -> Frame | None:
        try:
            msg = await self.ws.receive()
        except WebSocketDisconnect as exc:
            self.close_code, self.close_reason = exc.code, exc.reason or ""
            return None
        except RuntimeError:
            return None  # receive after the server closed the socket
        if msg["type"] == "websocket.disconnect":
            self.close_code = int(msg.get("code") or CloseCode.ABNORMAL)
            self.close_reason = str(msg.get("reason") or "")
            return None
        text: str | None = msg.get("text")
        if text is not None:
            return text
        data: bytes = msg.get("bytes") or b""
        return data

    async def pump(self, take: Take, handle: Handle) -> None:
        direct = self._direct
        if direct is not None:
            direct.deliver = take
        try:
            while (frame := await self.receive()) is not None:
                # one that came through the ASGI queue (it raced the reader's start, or
                # queued behind one ``take`` declined) is offered to ``take`` all the same
                if not take(frame) and not await handle(frame):
                    return
        finally:
            if direct is not None:
                direct.deliver = None

    async def send(self, frame: Frame) -> None:
        if isinstance(frame, str):
            direct = self._direct
            if direct is None or not direct.send_text_now(frame):
                await self.ws.send_text(frame)
        else:
            await self.ws.send_bytes(frame)

    async def close(self, code: int, reason: str = "") -> None:
        await sockets.close(self.ws, code, reason)
