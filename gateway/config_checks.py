"""Flag values the gateway could only fail on later, refused before anything starts.

Each check raises ``SystemExit`` with one line that names the flag and says what
it takes; ``gateway.cli`` prints that line and exits with status 2, as argparse
does for a value of the wrong type. What is checked here:

- numbers: the port is a port, no size, count or duration is negative (or not a
  number), and those that must be positive are (``POSITIVE``);
- TLS files: each exists, is a file, can be read, and holds what it must (the
  certificate and its key load together; the CA file loads);
- the plugin: a built-in name, or ``module:Class`` where the module imports and
  has that class (its models load later, in the background, as ever);
- the model servers' numbers (``--llm-*``, ``--asr-*``, ``--tts-*``), as flags or
  their variables: timeouts and streams above 0, waiters 0 or more
  (``gateway.model_flags``; the plugin would refuse them only once loading).
"""

from __future__ import annotations

import importlib
import math
import ssl
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

MAX_PORT = 65535

# Numbers for which 0 makes no sense (a loop with no pause, nothing allowed in):
# they must be above 0. Every other number must be 0 or more (0 is "off" or
# "no limit" where a flag's help says so).
POSITIVE = frozenset({
    "max_sessions", "max_message_bytes", "max_pending_commands", "journal_max_events",
    "max_conversation_items", "max_conversation_bytes", "reaper_interval_s",
    "store_timeout_s", "header_timeout_s", "webrtc_max_offer_bytes", "webrtc_ice_timeout_s",
})


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_numbers(config: GatewayConfig) -> None:
    if not 0 <= config.port <= MAX_PORT:
        raise SystemExit(f"--port must be between 0 and {MAX_PORT} (0 picks a free one), "
                         f"not {config.port}")
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            raise SystemExit(f"{flag(f.name)} must be a finite number, not {value}")
        if f.name in POSITIVE and value <= 0:
            raise SystemExit(f"{flag(f.name)} must be above 0, not {value:g}")
        if value < 0:
            raise SystemExit(f"{flag(f.name)} must be 0 or more, not {value:g}")


def _readable(name: str, path: Path) -> None:
    if path.is_dir():
        raise SystemExit(f"{flag(name)} {path}: is a directory, not a PEM file")
    try:
        with path.open("rb") as file:
            file.read(1)
    except FileNotFoundError:
        raise SystemExit(f"{flag(name)} {path}: no such file") from None
    except OSError as exc:
        raise SystemExit(f"{flag(name)} {path}: cannot read it ({exc.strerror})") from None


def check_tls(config: GatewayConfig) -> None:
    """The certificate, its key and the CA file: there, readable, and loadable."""
    if (config.ssl_certfile is None) != (config.ssl_keyfile is None):
        raise SystemExit("--ssl-certfile and --ssl-keyfile go together: give both or neither")
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_file"):
        path = getattr(config, name)
        if path is not None:
            _readable(name, path)
    if config.ssl_certfile is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                config.ssl_certfile, config.ssl_keyfile)
        except ssl.SSLError as exc:
            raise SystemExit(f"--ssl-certfile {config.ssl_certfile} and --ssl-keyfile "
                             f"{config.ssl_keyfile}: not a PEM certificate and its key "
                             f"({exc.reason or exc})") from None
    if config.ssl_ca_file is not None:
        try:
            ssl.create_default_context(cafile=config.ssl_ca_file)
        except ssl.SSLError as exc:
            raise SystemExit(f"--ssl-ca-file {config.ssl_ca_file}: not PEM CA certificates "
                             f"({exc.reason or exc})") from None


def check_plugin(name: str) -> None:
    """A plugin ``plugins.registry`` can load by that name (nothing is loaded here)."""
    from plugins.registry import BUILTIN

    if name in BUILTIN:
        return
    module_name, _, class_name = name.partition(":")
    if not module_name or not class_name:
        known = ", ".join(sorted(BUILTIN))
        raise SystemExit(f"--plugin {name!r:.60} is not a plugin: use one of {known}, "
                         "or module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"--plugin {name}: cannot import {module_name} ({exc})") from None
    if not isinstance(getattr(module, class_name, None), type):
        raise SystemExit(f"--plugin {name}: {module_name} has no class {class_name}")


def check_model_servers(environ: Mapping[str, str]) -> None:
    """Each number of ``gateway.model_flags`` set (the flags are in ``environ``
    by now, over their variables): a finite number, above 0 unless it may be 0."""
    # here, not at the top: gateway.config imports this module, and model_flags
    # imports the cascade plugin's speech clients (and numpy with them)
    from gateway.model_flags import FLAGS, MAY_BE_ZERO, env_name

    for name, (kind, _, _) in FLAGS.items():
        raw = environ.get(env_name(name))
        if kind is str or not raw:
            continue
        where = f"{flag(name)} (env {env_name(name)})"
        try:
            value = kind(raw)
        except ValueError:
            raise SystemExit(f"{where} must be a{'' if kind is float else ' whole'} number, "
                             f"not {raw!r}") from None
        if not math.isfinite(value):
            raise SystemExit(f"{where} must be a finite number, not {raw}")
        if name in MAY_BE_ZERO and value < 0:
            raise SystemExit(f"{where} must be 0 or more, not {raw}")
        if name not in MAY_BE_ZERO and value <= 0:
            raise SystemExit(f"{where} must be above 0, not {raw}")
