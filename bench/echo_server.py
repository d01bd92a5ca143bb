"""A bare ``websockets`` echo server: the floor a realtime relay cannot go under.

Every ``input_audio_buffer.append`` JSON message is parsed and answered with a
JSON message of the same size (the same fields, ``type`` renamed to the
equally long ``input_audio_buffer.echoed``, no whitespace added), so per frame
the server does what any relay must: read a WebSocket frame, parse JSON,
serialise JSON, write a WebSocket frame. Nothing else — no base64 decode, no
VAD, no journal. Other messages are ignored.

    .venv/bin/python bench/echo_server.py [--host 127.0.0.1] [--port 0] [--uvloop]
        [--stack websockets|uvicorn]

It prints ``echo-server ready: ws://HOST:PORT/`` once listening and runs until
SIGTERM/SIGINT. It uses the default asyncio event loop unless ``--uvloop`` is
given (the gateway runs on uvloop by default, ``--loop``). ``--stack uvicorn``
serves the same echo through the gateway's WebSocket stack, Starlette on
uvicorn (its websockets-sansio protocol): the difference to the default stack,
``websockets``' own server, is what that stack costs per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from websockets.asyncio.server import ServerConnection, serve

APPEND = "input_audio_buffer.append"
ECHOED = "input_audio_buffer.echoed"  # as long as APPEND: a compact client gets
# back exactly as many bytes as it sent (a reply that came out shorter is padded)


def echo(message: str | bytes) -> str | None:
    """The reply to one message, or None for a message that gets none."""
    if not isinstance(message, str):
        return None
    try:
        obj = json.loads(message)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("type") != APPEND:
        return None
    obj["type"] = ECHOED
    reply = json.dumps(obj, separators=(",", ":"))
    short = len(message) - len(reply) - len(',"pad":""')
    if short >= 0:
        obj["pad"] = "x" * short
        reply = json.dumps(obj, separators=(",", ":"))
    return reply


async def handler(ws: ServerConnection) -> None:
    async for message in ws:
        reply = echo(message)
        if reply is not None:
            await ws.send(reply)


async def _stopped() -> None:
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    await stop


async def main_async(host: str, port: int, deflate: bool) -> None:
    async with serve(handler, host, port, max_size=None,
                     compression="deflate" if deflate else None,
                     ping_interval=None) as server:
        sock_host, sock_port = next(iter(server.sockets)).getsockname()[:2]
        print(f"echo-server ready: ws://{sock_host}:{sock_port}/", flush=True)
        await _stopped()


async def main_uvicorn(host: str, port: int, deflate: bool) -> None:
    """The same echo on the gateway's stack: Starlette's WebSocket on uvicorn, with
    the socket options gateway.cli.serve gives it (keepalive pings off, as above)."""
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                reply = echo(msg.get("text") or msg.get("bytes") or b"")
                if reply is not None:
                    await ws.send_text(reply)
        except WebSocketDisconnect:
            return

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((host, port))
    sock.listen(512)
    server = uvicorn.Server(uvicorn.Config(
        Starlette(routes=[WebSocketRoute("/", endpoint)]), log_config=None,
        log_level="warning", lifespan="off", ws_max_size=16 * 1024 * 1024,
        ws_ping_interval=None, ws_per_message_deflate=deflate))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    sock_host, sock_port = sock.getsockname()[:2]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    print(f"echo-server ready: ws://{sock_host}:{sock_port}/", flush=True)
    await _stopped()
    server.should_exit = True
    await serving


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument("--stack", choices=("websockets", "uvicorn"), default="websockets",
                        help="websockets' own server, or Starlette on uvicorn (the "
                             "gateway's) [default %(default)s]")
    parser.add_argument("--compression", choices=("none", "deflate"), default="none",
                        help="deflate: accept a client's offer of permessage-deflate "
                             "[default %(default)s]")
    args = parser.parse_args()
    main = main_async if args.stack == "websockets" else main_uvicorn
    run = main(args.host, args.port, args.compression == "deflate")
    if args.uvloop:
        import uvloop
        uvloop.run(run)
    else:
        asyncio.run(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
