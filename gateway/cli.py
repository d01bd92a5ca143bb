"""``duplex-gateway``: the command line."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gateway import log_setup
from gateway.config import GatewayConfig, add_serve_arguments, from_args
from gateway.config_checks import check_model_servers
from gateway.http_limits import raise_open_files_limit
from gateway.interrupts import interrupt_as_terminate
from gateway.model_flags import add_model_server_arguments, export_model_server_flags
from gateway.serving import (
    banners,
    listen,
    loop_factory,
    reachable_at,
    serve_on_loop,
    uvicorn_config,
)

if TYPE_CHECKING:
    from duplex.store.supervisor import Supervisor


EXIT_USAGE = 2  # what argparse exits with for a bad flag; ours for every refusal


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``serve``'s usage alone is 60 lines), not a
    usage block and then the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _Help(argparse.HelpFormatter):
    """Help text wrapped at spaces only: a flag named in a help string (``--tts-url``)
    is never cut at its hyphen into ``--tts-`` and ``url``."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="duplex-gateway", formatter_class=_Help,
        description="Real-time full-duplex voice gateway (OpenAI Realtime compatible, "
                    "Redis-leased resumable sessions).")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="run the gateway and the browser demo", formatter_class=_Help,
        description="Run the gateway. Every flag can also be set by the environment "
                    "variable shown; REDIS_URL is accepted as is. With no Redis URL an "
                    "embedded Valkey starts under --data-dir and dies with the gateway.")
    add_serve_arguments(serve)
    add_model_server_arguments(serve)  # --llm-*: gateway.model_flags
    call = sub.add_parser(
        "call", help="speak audio files to a running gateway, one turn each",
        formatter_class=_Help,
        description="Speak audio files to a running gateway as the user's turns of one "
                    "session (WAV of any sample format, FLAC, OGG, ...: anything "
                    "libsndfile reads), print for each turn both transcripts and the "
                    "wait a person has: mouth to ear, from the last voiced sample sent "
                    "(found in the audio by its energy) to the first reply audio "
                    "received, with the server's split of it (turn detection, "
                    "transcribe, think, speak); and save the spoken answers.")
    call.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime",
                      help="the gateway's realtime URL [default %(default)s]")
    call.add_argument("--wav", type=Path, nargs="+", action="extend", required=True,
                      metavar="FILE",
                      help="a question (any audio file); give several, or --wav again, "
                           "for several turns")
    call.add_argument("--out", type=Path, metavar="FILE",
                      help="write the spoken answer here (24 kHz; .wav, .flac or .ogg); "
                           "with several turns one file per turn: OUT-1.wav, OUT-2.wav, ...")
    call.add_argument("--fast", action="store_true",
                      help="send the audio as fast as possible instead of at real time "
                           "(mouth to ear then counts from when the last voiced sample "
                           "was sent, not spoken)")
    call.add_argument("--api-key", default=os.environ.get("DUPLEX_GATEWAY_API_KEY"),
                      help="the gateway's API key [env DUPLEX_GATEWAY_API_KEY]")
    call.add_argument("--instructions", help="session instructions (the system prompt)")
    call.add_argument("--turn-detection", choices=("server_vad", "semantic_vad"),
                      help="the turn detection the session asks for (the browser demo "
                           "asks for semantic_vad) [default: the gateway's, server_vad]")
    call.add_argument("--timeout-s", type=float, default=60.0,
                      help="give up on a turn after this long [default %(default)s]")
    return parser


def _in_use(data_dir: Path, holder: int | None, url: str) -> str:
    by = f"another gateway (pid {holder})" if holder else "another gateway"
    return (f"the data dir {data_dir} is in use by {by}; give this one "
            f"its own --data-dir, or share that gateway's store with --redis-url {url}")


def _refused(why: str) -> int:
    """A flag the gateway cannot run with: one line, nothing started, status 2."""
    print(f"duplex-gateway: {why}", file=sys.stderr)
    return EXIT_USAGE


def _checked(args: argparse.Namespace) -> GatewayConfig | str:
    """The configuration the flags give, or the one line that refuses them (every
    check says why in its ``SystemExit``)."""
    try:
        check_model_servers(os.environ)  # the flags were exported there
        config = from_args(args)
        loop_factory(config.loop)  # an unusable --loop fails now, not after the store starts
    except SystemExit as exc:
        if isinstance(exc.code, str):
            return exc.code.removeprefix("duplex-gateway: ")
        raise
    return config


def serve(config: GatewayConfig) -> int:
    from duplex.errors import StoreUnavailable
    from duplex.store.dirlock import DataDirInUse
    from duplex.store.embedded import EmbeddedValkey
    from duplex.store.supervisor import Supervisor

    secrets = (config.api_key or "", config.twilio_auth_token or "",
               config.plivo_auth_token or "",
               config.exotel_credentials or "", config.vonage_signature_secret or "")
    log_setup.configure(config.log_level, config.log_format, secrets)
    before, after = raise_open_files_limit()
    if after < 2 * config.max_connections:
        logging.getLogger("duplex_gateway").warning(
            "open files limited to %d (was %d): fewer than --max-connections %d needs",
            after, before, config.max_connections)
    embedded = None
    if config.redis_url is None:
        embedded = Supervisor(EmbeddedValkey(config.data_dir / "valkey",
                                             maxmemory=config.valkey_maxmemory))
        try:
            config = replace(config, redis_url=embedded.server.start())
        except DataDirInUse as exc:
            return _refused(_in_use(config.data_dir, exc.holder, embedded.server.url))
        except StoreUnavailable as exc:
            print(f"duplex-gateway: cannot start the embedded Valkey: {exc}", file=sys.stderr)
            return 1
        embedded.start()  # restarts the server whenever it exits
    try:
        if config.workers > 1:
            from gateway.workers import supervise

            return supervise(config)
        try:
            sock = listen(config.host, config.port)
        except OSError as exc:
            print(f"duplex-gateway: cannot listen on {config.host}:{config.port}: {exc}",
                  file=sys.stderr)
            return 1
        host, port = sock.getsockname()[:2]
        if config.advertise_url is None:
            config = replace(config, advertise_url=reachable_at(host, port, tls=config.tls))
        listening, ready = banners(config, host, port)
        print(listening, flush=True)
        run_server(config, [sock], on_ready=ready, embedded=embedded)
        return 0
    finally:
        if embedded is not None:
            interrupt_as_terminate()  # asyncio.run (--workers) gave SIGINT back to Python
            embedded.stop()


def run_server(config: GatewayConfig, sockets: list[socket.socket], *, on_ready: str,
               embedded: Supervisor | None = None) -> None:
    """Serve the gateway on ``sockets`` until SIGTERM/SIGINT."""
    import uvicorn

    from gateway.app import create_app

    app = create_app(config, on_ready=on_ready, settle_heap=True)
    if embedded is not None:
        app.state.gateway.watch_store_server(embedded)
    serve_on_loop(config, uvicorn.Server(uvicorn_config(config, app)), sockets)


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "serve":
        interrupt_as_terminate()
        export_model_server_flags(args)
        config = _checked(args)
        return _refused(config) if isinstance(config, str) else serve(config)
    if args.command == "call":
        from gateway.call import run_call

        return run_call(args.url, args.wav, args.out, realtime=not args.fast,
                        api_key=args.api_key, instructions=args.instructions,
                        timeout_s=args.timeout_s, turn_detection=args.turn_detection)
    return 2


if __name__ == "__main__":
    sys.exit(main())
