"""A client's WebSocket messages handed to its session as they are parsed.

Through ASGI, each message a client sends takes a long way in: uvicorn parses it,
queues it for the application and pauses the socket's reading; the endpoint's
reader task wakes, takes it through Starlette's ``receive``, and uvicorn resumes
reading. For 50 audio appends a second a session that is a task wake-up, a
queue round and a pause and resume of the socket per message, for a message the
reader then only decodes and queues again in the session's inbox.

``DirectReads`` is uvicorn's WebSocket protocol with one addition: a reader
may set ``deliver``, a callback that takes a message (text, or bytes) at once,
while uvicorn is still in ``data_received``, and says whether it did. What it
does not take (and anything that arrives while messages wait in the ASGI queue,
so that order holds) goes the usual way, to the endpoint's ``receive``; so do
the disconnect, and every frame that is not a data message. ``deliver`` must not
block: it is called from the event loop's protocol callback.

Order: a message ``deliver`` takes was sent after every message the endpoint
has taken from ``receive``. So the endpoint must finish with each message it
takes from ``receive`` before it waits on anything, unless ``deliver`` refuses
everything meanwhile (as the gateway's reader does once a session is closed).

The way out is as long: Starlette's ``send``, its exception wrapper, uvicorn's
``send`` coroutine and its wait on ``writable``, for each server event.
``send_text_now`` does what that path does for a text message on an open,
writable socket, and leaves every other case (a handshake, a close, a peer gone,
a full transport) to it.

Each socket's close is logged as its open is (uvicorn logs ``[accepted]``): one
line with the code, who closed it, and the reason.

Endpoints never use this module: ``gateway.transports.frames.SocketFrames`` is the
one frame source, and it takes this way where uvicorn serves the socket.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.websockets import WebSocket
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState
from websockets.protocol import State

Deliver = Callable[[str | bytes], bool]  # a message (text, or binary) -> taken


class DirectReads(WebSocketsSansIOProtocol):
    deliver: Deliver | None = None
    delivered = 0  # messages taken by ``deliver``, this connection (for tests)

    def send_receive_event_to_app(self) -> None:
        deliver = self.deliver
        if deliver is not None and not self.close_sent and self.queue.empty():
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            if self.curr_msg_data_type == "text":
                try:
                    taken = deliver(data.decode())
                except UnicodeDecodeError:
                    taken = False  # uvicorn's own path closes with 1007
            else:
                taken = deliver(data)
            if taken:
                self.frames = []
                self.delivered += 1
                return
        super().send_receive_event_to_app()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn.state is not State.CONNECTING:  # accepted: its open was logged
            self.logger.info('%s - "WebSocket %s" closed %s', get_client_addr(self.scope),
                             get_path_with_query_string(self.scope), self._how_closed())
        super().connection_lost(exc)

    def _how_closed(self) -> str:
        sent, received = self.conn.close_sent, self.conn.close_rcvd
        if received is not None and (sent is None or self.conn.close_rcvd_then_sent):
            code, reason, by = received.code, received.reason, "the client"
        elif sent is not None:
            code, reason, by = sent.code, sent.reason, "the gateway"
        else:
            return "1006: the connection dropped without a close frame"
        return f"{code} by {by}" + (f": {reason!r}" if reason else "")  # repr: a peer's text

    def send_text_now(self, text: str) -> bool:
        """Send ``text`` as uvicorn's ASGI ``send`` would, without the trip through
        Starlette and uvicorn's coroutine (and its wait on ``writable``, an
        ``asyncio.Event``); False, and nothing sent, unless the socket is open and
        writable now: the caller then takes the ASGI way, which waits, or raises."""
        if (self.disconnected or self.close_sent or not self.handshake_complete
                or self.initial_response is not None or not self.writable.is_set()):
            return False
        try:
            self.conn.send_text(text.encode())
        except InvalidState:
            return False
        self.transport.write(b"".join(self.conn.data_to_send()))
        return True


def direct_reads(ws: WebSocket) -> DirectReads | None:
    """The ``DirectReads`` protocol serving ``ws``, if that is what serves it (the
    gateway's own server; not a test client or another ASGI server)."""
    protocol = getattr(ws._receive, "__self__", None)  # uvicorn passes its bound receive
    return protocol if isinstance(protocol, DirectReads) else None
