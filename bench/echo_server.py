"""A bare ``websockets`` echo server: the floor a realtime relay cannot go under.

Every ``input_audio_buffer.append`` JSON message is parsed and answered with a
JSON message of the same size (the same fields, ``type`` renamed to the
equally long ``input_audio_buffer.echoed``, no whitespace added), so per frame
the server does what any relay must: read a WebSocket frame, parse JSON,
serialise JSON, write a WebSocket frame. Nothing else — no base64 decode, no
VAD, no journal. Other messages are ignored.

    .venv/bin/python bench/echo_server.py [--host 127.0.0.1] [--port 0] [--uvloop]

It prints ``echo-server ready: ws://HOST:PORT/`` once listening and runs until
SIGTERM/SIGINT. It uses the default asyncio event loop, like the gateway
(``asyncio.run(uvicorn.Server.serve())``), unless ``--uvloop`` is given.
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


async def handler(ws: ServerConnection) -> None:
    async for message in ws:
        if not isinstance(message, str):
            continue
        try:
            obj = json.loads(message)
        except ValueError:
            continue
        if not isinstance(obj, dict) or obj.get("type") != APPEND:
            continue
        obj["type"] = ECHOED
        reply = json.dumps(obj, separators=(",", ":"))
        short = len(message) - len(reply) - len(',"pad":""')
        if short >= 0:
            obj["pad"] = "x" * short
            reply = json.dumps(obj, separators=(",", ":"))
        await ws.send(reply)


async def main_async(host: str, port: int) -> None:
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    async with serve(handler, host, port, max_size=None, compression=None,
                     ping_interval=None) as server:
        sock_host, sock_port = next(iter(server.sockets)).getsockname()[:2]
        print(f"echo-server ready: ws://{sock_host}:{sock_port}/", flush=True)
        await stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop
        uvloop.run(main_async(args.host, args.port))
    else:
        asyncio.run(main_async(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
