"""``serve``'s flags for models on servers apart from the gateway (``--llm-*``,
``--asr-*``).

The cascade plugin reads its model choices from the environment
(``plugins.cascade.llm``), which ``--workers`` inherit; these flags are a
front for those variables, so each is also settable as the variable shown.
The API key is read from ``DUPLEX_LLM_API_KEY`` too.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import MutableMapping

from engines.stages import ModelServer

_DEFAULTS = ModelServer("")
# flag → (type, help, default as shown); each flag's variable is DUPLEX_GATEWAY_<FLAG>
FLAGS: dict[str, tuple[type, str, object]] = {
    "llm_url": (str, "the thinker runs on this OpenAI-compatible server (http(s)://HOST:PORT/v1: "
                     "vLLM, llama.cpp's llama-server, ...) instead of in the gateway "
                     "(docs/model-servers.md)", "unset: in the gateway"),
    "llm_api_key": (str, "bearer key for --llm-url's server (also env DUPLEX_LLM_API_KEY)",
                    None),
    "llm_model": (str, "with --llm-url the server's model name; without it the local model "
                       "(plugins.cascade.llm)", "the first of the server's /v1/models"),
    "llm_timeout_s": (float, "longest a model server may stay silent (connecting, answering, "
                             "between streamed chunks, or for a free stream) before the turn "
                             "fails with an error", _DEFAULTS.timeout_s),
    "llm_max_streams": (int, "replies each gateway process streams from the server at once",
                        _DEFAULTS.max_streams),
    "llm_max_waiting": (int, "replies that may wait for a stream; more fail at once with an "
                             "error", _DEFAULTS.max_waiting),
    "asr_url": (str, "the listener transcribes on this OpenAI-compatible speech server "
                     "(POST /v1/audio/transcriptions, http(s)://HOST:PORT/v1) instead of in "
                     "the gateway; --llm-timeout-s bounds it too", "unset: in the gateway"),
    "asr_api_key": (str, "bearer key for --asr-url's server", None),
    "asr_model": (str, "with --asr-url the server's model name; without it the local "
                       "Whisper (plugins.cascade.asr)", "whisper-1"),
}


def _env(name: str) -> str:
    return "DUPLEX_GATEWAY_" + name.upper()


def add_model_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models on their own servers")
    for name, (kind, text, default) in FLAGS.items():
        shown = "unset" if default is None else default
        group.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                           metavar=name.upper(),
                           help=f"{text} [env {_env(name)}; default {shown}]")


def export_model_server_flags(args: argparse.Namespace,
                              environ: MutableMapping[str, str] = os.environ) -> None:
    """Put the flags given into the environment, where the plugin (and every
    worker) reads them; a flag wins over its variable."""
    for name in FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            environ[_env(name)] = str(value)
