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
# flag → (variable, type, help)
_FLAGS: dict[str, tuple[str, type, str]] = {
    "llm_url": ("DUPLEX_GATEWAY_LLM_URL", str,
                "the thinker runs on this OpenAI-compatible server (http[s]://HOST:PORT/v1: "
                "vLLM, llama.cpp's llama-server, ...) instead of in the gateway "
                "(docs/model-servers.md) [default: in the gateway]"),
    "llm_api_key": ("DUPLEX_GATEWAY_LLM_API_KEY", str,
                    "bearer key for --llm-url's server (also env DUPLEX_LLM_API_KEY)"),
    "llm_model": ("DUPLEX_GATEWAY_LLM_MODEL", str,
                  "with --llm-url the server's model name [default: the first of its "
                  "/v1/models]; without it the local model (plugins.cascade.llm)"),
    "llm_timeout_s": ("DUPLEX_GATEWAY_LLM_TIMEOUT_S", float,
                      "longest the model server may stay silent (connecting, answering, "
                      "between streamed chunks, or a free stream) before the turn fails "
                      f"with an error [default {_DEFAULTS.timeout_s:g}]"),
    "llm_max_streams": ("DUPLEX_GATEWAY_LLM_MAX_STREAMS", int,
                        "replies each gateway process streams from the server at once "
                        f"[default {_DEFAULTS.max_streams}]"),
    "llm_max_waiting": ("DUPLEX_GATEWAY_LLM_MAX_WAITING", int,
                        "replies that may wait for a stream; more fail at once with an "
                        f"error [default {_DEFAULTS.max_waiting}]"),
    "asr_url": ("DUPLEX_GATEWAY_ASR_URL", str,
                "the listener transcribes on this OpenAI-compatible speech server "
                "(POST /v1/audio/transcriptions, http[s]://HOST:PORT/v1) instead of in the "
                "gateway; the same --llm-timeout-s bounds it [default: in the gateway]"),
    "asr_api_key": ("DUPLEX_GATEWAY_ASR_API_KEY", str, "bearer key for --asr-url's server"),
    "asr_model": ("DUPLEX_GATEWAY_ASR_MODEL", str,
                  "with --asr-url the server's model name [default whisper-1]; without it "
                  "the local Whisper (plugins.cascade.asr)"),
}


def add_model_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models on their own servers")
    for name, (env, kind, text) in _FLAGS.items():
        group.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                           metavar=name.upper(), help=f"{text} [env {env}]")


def export_model_server_flags(args: argparse.Namespace,
                              environ: MutableMapping[str, str] = os.environ) -> None:
    """Put the flags given into the environment, where the plugin (and every
    worker) reads them; a flag wins over its variable."""
    for name, (env, _, _) in _FLAGS.items():
        value = getattr(args, name, None)
        if value is not None:
            environ[env] = str(value)
