"""Gateway configuration: command-line flags, each also read from the environment.

Every flag ``--some-flag`` has the variable ``DUPLEX_GATEWAY_SOME_FLAG``; a flag
given on the command line wins. ``REDIS_URL`` is accepted as it is.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gateway import log_setup, tracing
from gateway.auth import parse_origins
from gateway.config_checks import check_numbers, check_plugin, check_tls
from gateway.flag_groups import FLAG_GROUPS

ENV_PREFIX = "DUPLEX_GATEWAY_"
MAX_WORKERS = 256  # --workers: far above any core count a gateway host has


def checkout_root() -> Path | None:
    """The source checkout this code runs from (an editable install too), or None
    for an installed package: the folder above ``gateway/`` that holds its
    ``pyproject.toml``."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def default_data_dir() -> Path:
    """``.data/`` in the checkout the gateway runs from, so that two checkouts never
    share a store (nor reap each other's sessions); for an installed package, the
    user's ``$XDG_DATA_HOME/duplex-gateway``. Either way one gateway at a time
    holds it (``duplex.store.dirlock``)."""
    root = checkout_root()
    if root is not None:
        return root / ".data"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "duplex-gateway"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    plugin: str = "cascade"
    redis_url: str | None = None
    redis_replica_acks: int | None = None
    data_dir: Path = Path()
    api_key: str | None = None
    max_sessions: int = 64
    max_sessions_per_process: int = 0
    disconnect_grace_s: float = 30.0
    idle_ttl_s: float = 0.0
    max_session_s: float = 3600.0
    output_lead_ms: float = 500.0
    max_message_bytes: int = 4 * 1024 * 1024
    max_pending_commands: int = 512
    journal_max_events: int = 20000
    resume_replay_ttl_s: float = 60.0
    resume_replay_max_bytes: int = 8 * 1024 * 1024
    max_conversation_items: int = 1000
    max_conversation_bytes: int = 2 * 1024 * 1024
    ended_session_retention_s: float = 300.0
    reaper_interval_s: float = 1.0
    store_timeout_s: float = 2.0
    store_down_unhealthy_s: float = 30.0
    log_level: str = "info"
    log_format: str = "text"
    twilio_auth_token: str | None = None
    public_url: str | None = None
    twilio_instructions: str | None = None
    telnyx_public_key: str | None = None
    telnyx_instructions: str | None = None
    telnyx_codec: str = "PCMU"
    plivo_auth_token: str | None = None
    plivo_instructions: str | None = None
    vonage_signature_secret: str | None = None
    exotel_credentials: str | None = None
    advertise_url: str | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_ca_file: Path | None = None
    header_timeout_s: float = 10.0
    max_connections: int = 4096
    max_sessions_per_address: int = 0
    shutdown_timeout_s: float = 10.0
    workers: int = 1
    loop: str = "auto"
    ws_compression: str = "deflate"
    otel: str | None = None

    @property
    def tls(self) -> bool:
        return self.ssl_certfile is not None
    allowed_origins: str | None = None

    @property
    def replica_acks(self) -> int:
        """Replicas each durable write waits for (``--redis-replica-acks``)."""
        if self.redis_replica_acks is not None:
            return self.redis_replica_acks
        return 1 if (self.redis_url or "").startswith("redis+sentinel://") else 0


# flag → (type, help); defaults come from GatewayConfig
_FLAGS: dict[str, tuple[Any, str]] = {
    "host": (str, "interface to listen on"),
    "port": (int, "TCP port (0 picks a free one)"),
    "plugin": (str, "model plugin: cascade (the CPU voice agent), tone (synthetic, for "
                      "tests and load), or module:Class"),
    "redis_url": (str, "Redis/Valkey URL (redis://, rediss://, unix://, or "
                       "redis+sentinel://HOST:PORT,HOST:PORT.../MASTER to follow failovers); "
                       "unset: start an embedded Valkey under --data-dir"),
    "redis_replica_acks": (int, "Redis replicas that must hold each lease grant, epoch bump "
                                "and journaled event before it counts (WAIT); unset: 1 with "
                                "redis+sentinel://, else 0"),
    "data_dir": (Path, "where the embedded Valkey keeps its socket and AOF: one gateway "
                       "at a time (a second one on it exits, naming the holder's pid); "
                       "the default is .data/ in a source checkout, else the user's "
                       "$XDG_DATA_HOME/duplex-gateway"),
    "api_key": (str, "require this key on every route that starts or observes sessions: "
                     "/v1/realtime (Authorization: Bearer, or the "
                     "openai-insecure-api-key.<key> WebSocket subprotocol), /metrics and "
                     "the full /readyz (Bearer); the Twilio routes then need "
                     "--twilio-auth-token or are off"),
    "max_sessions": (int, "open sessions allowed across all gateways on this Redis"),
    "max_sessions_per_process": (int, "open sessions allowed per gateway process (0: no limit)"),
    "disconnect_grace_s": (float, "how long a detached session waits for a resume"),
    "idle_ttl_s": (float, "expire attached sessions idle this long (0: never, as OpenAI)"),
    "max_session_s": (float, "end each session this long after it opened, with OpenAI's "
                             "session_expired error (OpenAI's limit: 60 minutes; 0: never)"),
    "output_lead_ms": (float, "how far ahead of real time reply audio is sent"),
    "max_message_bytes": (int, "largest client WebSocket message accepted"),
    "max_pending_commands": (int, "client commands queued per session before "
                                  "input_backpressure"),
    "journal_max_events": (int, "server events kept per session for resume"),
    "resume_replay_ttl_s": (float, "how long a server event stays replayable"),
    "resume_replay_max_bytes": (int, "journal bytes kept per session for resume"),
    "max_conversation_items": (int, "items a conversation holds; past it a client's new "
                                    "item is refused (conversation_full) and the "
                                    "conversation's own turns forget the oldest"),
    "max_conversation_bytes": (int, "bytes of words a conversation holds (same rule)"),
    "ended_session_retention_s": (float, "how long an ended session's keys stay in Redis "
                                         "(a late resume is told it ended)"),
    "reaper_interval_s": (float, "owner heartbeat and expiry sweep period; an owner "
                                 "is presumed dead after 3 missed beats"),
    "store_timeout_s": (float, "longest wait for one Redis operation"),
    "store_down_unhealthy_s": (float, "/healthz fails once Redis has been unreachable this "
                                      "long, so a process supervisor restarts the gateway "
                                      "(0: never)"),
    "log_level": (str, "debug, info, warning, error or critical (secrets are masked at every "
                       "level)"),
    "log_format": (str, "text (one line per event, for people) or json (one object per "
                        "line, with the session id, for log pipelines)"),
    "twilio_auth_token": (str, "Twilio auth token: when set, X-Twilio-Signature is required "
                               "on /v1/twilio/voice and /v1/twilio/media-stream; with "
                               "--api-key and no token those routes are off"),
    "public_url": (str, "this gateway's public https:// base URL, as Twilio reaches it "
                        "(unset: taken from the request's Host)"),
    "twilio_instructions": (str, "session instructions for Twilio calls"),
    "telnyx_public_key": (str, "Telnyx's webhook public key (base64, Mission Control → Keys "
                               "& Credentials): /v1/telnyx/voice then requires a valid "
                               "telnyx-signature-ed25519; unset: the Telnyx routes are off"),
    "telnyx_instructions": (str, "session instructions for Telnyx calls"),
    "telnyx_codec": (str, "the audio of Telnyx calls, both ways: PCMU or PCMA (8 kHz) or "
                          "L16 (16 kHz)"),
    "plivo_auth_token": (str, "Plivo auth token: /v1/plivo/answer then requires a valid "
                              "X-Plivo-Signature-V3; unset: the Plivo routes are off"),
    "plivo_instructions": (str, "session instructions for Plivo calls"),
    "vonage_signature_secret": (str, "the Vonage account's signature secret: turns the "
                                     "Vonage routes (/v1/vonage/*) on, and every answer "
                                     "webhook must then carry Vonage's signed JWT "
                                     "(unset: the routes are off)"),
    "exotel_credentials": (str, "KEY:TOKEN that Exotel's Voicebot applet sends as Basic "
                                "auth (its URL wss://KEY:TOKEN@host/v1/exotel/media-stream): "
                                "turns /v1/exotel/media-stream on, and every stream must "
                                "carry it (unset: the route is off)"),
    "advertise_url": (str, "ws://HOST:PORT where the other gateways on this Redis reach this "
                           "one, to relay a resume of a session it owns (unset: the "
                           "listening address, or the hostname when listening on all "
                           "interfaces; with --workers each worker advertises this host at "
                           "a relay port of its own)"),
    "allowed_origins": (str, "browser pages that may open WebSockets here, by their Origin, "
                             "comma-separated: scheme://host, scheme://host:port, "
                             "scheme://host:* (any port) or * (any page); this gateway's own "
                             "origin is always allowed, and sockets without an Origin (not "
                             "a browser) pass (unset: http and https on localhost, "
                             "127.0.0.1 and ::1, any port)"),
    "ssl_certfile": (Path, "serve https:// and wss:// with this certificate (PEM; with "
                           "--ssl-keyfile)"),
    "ssl_keyfile": (Path, "the certificate's private key (PEM)"),
    "ssl_ca_file": (Path, "CA certificates (PEM) trusted for wss:// relays to the other "
                          "gateways (unset: the system's, plus this gateway's own "
                          "certificate, so gateways sharing one self-signed certificate "
                          "trust each other)"),
    "header_timeout_s": (float, "a request (a WebSocket upgrade too) must send its headers "
                                "within this long, or its connection is closed (slowloris)"),
    "max_connections": (int, "open connections served at once; more get 503 (the process "
                             "also lifts its open-files limit to the hard one)"),
    "max_sessions_per_address": (int, "open sessions per client address on this process "
                                      "(0: no limit; behind a load balancer every client "
                                      "has its address)"),
    "shutdown_timeout_s": (float, "on SIGTERM, how long sockets get to close; then they "
                                  "are cut and their sessions stay resumable elsewhere"),
    "workers": (int, f"gateway processes serving this one port, e.g. one per core (at most "
                     f"{MAX_WORKERS}; SO_REUSEPORT): each owns its sessions as a separate "
                     "host would, a resume reaching another one is relayed to the owner, "
                     "/metrics and /readyz answer for the process a request reaches, and "
                     "one that dies is started again"),
    "loop": (str, "event loop: uvloop (less CPU per message), asyncio, or auto (uvloop "
                  "where it is installed: a dependency except on Windows)"),
    "ws_compression": (str, "deflate: accept a client's offer of permessage-deflate (about "
                            "half the bytes of base64 speech, for ~50 KB more memory a "
                            "session and a compression of every message each way: "
                            "bench/README.md); none: decline it"),
    "otel": (str, "export an OpenTelemetry trace of each reply (its split: turn detection, "
                  "transcribe, each stage's first output, first audio; ids, never words "
                  "or audio) by OTLP/HTTP to this endpoint, e.g. http://localhost:4318 "
                  "(needs the otel extra; unset: on when OTEL_EXPORTER_OTLP_ENDPOINT or "
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; OTEL_SERVICE_NAME names the "
                  "service, duplex-gateway by default)"),
}

LOOPS = ("auto", "uvloop", "asyncio")
WS_COMPRESSION = ("deflate", "none")

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag, in --help's sections (``gateway.flag_groups``)."""
    defaults = GatewayConfig()
    sections = list(FLAG_GROUPS.items())
    placed = {name for _, names in FLAG_GROUPS.values() for name in names}
    rest = tuple(name for name in _FLAGS if name not in placed)
    if rest:
        sections.append(("other", ("", rest)))
    for title, (about, names) in sections:
        group = parser.add_argument_group(title, about or None)
        for name in names:
            kind, text = _FLAGS[name]
            env = ENV_PREFIX + name.upper()
            default = getattr(defaults, name)
            if name == "data_dir":
                default = default_data_dir()
            shown = "unset" if default is None else default
            group.add_argument(
                "--" + name.replace("_", "-"), type=kind, default=None, metavar=name.upper(),
                help=f"{text} [env {env}; default {shown}]",
            )


def from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> GatewayConfig:
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(GatewayConfig):
        kind = _FLAGS[f.name][0]
        given = getattr(args, f.name, None)
        if given is None:
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None and f.name == "redis_url":
                raw = env.get("REDIS_URL")
            if raw is not None and raw != "":
                try:
                    given = kind(raw)
                except ValueError:
                    raise SystemExit(f"{ENV_PREFIX}{f.name.upper()}={raw!r} is not a valid "
                                     f"{kind.__name__}") from None
        if given is not None:
            values[f.name] = given
    if "data_dir" not in values:
        values["data_dir"] = default_data_dir()
    config = GatewayConfig(**values)
    _check(config, environ)
    return config


def _check(config: GatewayConfig, environ: dict[str, str] | None = None) -> None:
    """Refuse values the gateway could only fail on later (SystemExit: one line)."""
    if config.redis_replica_acks is not None and config.redis_replica_acks < 0:
        raise SystemExit("--redis-replica-acks must be >= 0")
    if not 1 <= config.workers <= MAX_WORKERS:
        raise SystemExit(f"--workers must be between 1 and {MAX_WORKERS}")
    check_numbers(config)
    check_tls(config)
    if config.log_level.lower() not in LOG_LEVELS:
        raise SystemExit(f"--log-level must be one of {', '.join(LOG_LEVELS)}, "
                         f"not {config.log_level!r:.40}")
    if config.loop not in LOOPS:
        raise SystemExit(f"--loop must be one of {', '.join(LOOPS)}, not {config.loop!r:.40}")
    if config.log_format not in log_setup.FORMATS:
        raise SystemExit(f"--log-format must be one of {', '.join(log_setup.FORMATS)}, "
                         f"not {config.log_format!r:.40}")
    if config.ws_compression not in WS_COMPRESSION:
        raise SystemExit(f"--ws-compression must be one of {', '.join(WS_COMPRESSION)}, "
                         f"not {config.ws_compression!r:.40}")
    _check_carriers(config)
    check_plugin(config.plugin)
    tracing.require(config, environ)
    try:
        parse_origins(config.allowed_origins or "*")
    except ValueError as exc:
        raise SystemExit(f"--allowed-origins: {str(exc)!r:.80} is not an origin (scheme://host, "
                         "scheme://host:port, scheme://host:* or *)") from None


def _check_carriers(config: GatewayConfig) -> None:
    if config.exotel_credentials is not None and ":" not in config.exotel_credentials:
        raise SystemExit("--exotel-credentials is KEY:TOKEN, as in the Voicebot applet's "
                         "URL wss://KEY:TOKEN@host/v1/exotel/media-stream")
    if config.telnyx_codec.upper() not in ("PCMU", "PCMA", "L16"):
        raise SystemExit(f"--telnyx-codec must be PCMU, PCMA or L16, "
                         f"not {config.telnyx_codec!r:.40}")
    if config.telnyx_public_key is not None:
        from gateway.telephony.telnyx_signature import public_key  # cryptography: when used

        try:
            public_key(config.telnyx_public_key)
        except ValueError:
            raise SystemExit("--telnyx-public-key must be the base64 of a 32-byte Ed25519 "
                             "public key, as Telnyx's Mission Control shows it") from None


# -- a configuration handed to another process (each worker of --workers N) --------


def encode_config(config: GatewayConfig) -> dict[str, Any]:
    """The configuration as JSON values (paths as text)."""
    return {f.name: None if (v := getattr(config, f.name)) is None
            else str(v) if isinstance(v, Path) else v for f in fields(GatewayConfig)}


def decode_config(values: dict[str, Any]) -> GatewayConfig:
    """The configuration ``encode_config`` gave, exactly."""
    typed: dict[str, Any] = {name: None if v is None else _FLAGS[name][0](v)
                             for name, v in values.items()}
    return GatewayConfig(**typed)
