"""``serve``'s flags for models on servers apart from the gateway (``--llm-*``,
``--asr-*``, ``--tts-*``).

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
from gateway.flag_groups import MODEL_SERVER_GROUP
from plugins.cascade import remote_tts, speech_server

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
                     "the gateway", "unset: in the gateway"),
    "asr_api_key": (str, "bearer key for --asr-url's server", None),
    "asr_model": (str, "with --asr-url the server's model name; without it the local "
                       "Whisper (plugins.cascade.asr)", "whisper-1"),
    "asr_timeout_s": (float, "longest --asr-url's server may stay silent (connecting, "
                             "answering, or for a free stream) before the turn fails with an "
                             "error", f"--llm-timeout-s's value, else "
                                      f"{speech_server.DEFAULT_TIMEOUT_S}"),
    "asr_max_streams": (int, "turns each gateway process transcribes on --asr-url's server at "
                             "once", speech_server.DEFAULT_MAX_STREAMS),
    "asr_max_waiting": (int, "turns that may wait for a stream; more fail at once with an "
                             "error", speech_server.DEFAULT_MAX_WAITING),
    "tts_url": (str, "the talker speaks through this OpenAI-compatible speech server "
                     "(POST /v1/audio/speech, 24 kHz pcm, http(s)://HOST:PORT/v1) instead of "
                     "piper in the gateway", "unset: in the gateway"),
    "tts_api_key": (str, "bearer key for --tts-url's server", None),
    "tts_model": (str, "with --tts-url the server's speech model", remote_tts.DEFAULT_MODEL),
    "tts_voice": (str, "with --tts-url the server's voice; without it a piper .onnx voice's "
                       "path", f"{remote_tts.DEFAULT_VOICE} with --tts-url, else piper's joe"),
    "tts_timeout_s": (float, "longest --tts-url's server may stay silent (connecting, "
                             "answering, between two pieces of audio, or for a free stream) "
                             "before the reply fails with an error",
                      speech_server.DEFAULT_TIMEOUT_S),
    "tts_max_streams": (int, "clauses each gateway process speaks through --tts-url's server "
                             "at once", speech_server.DEFAULT_MAX_STREAMS),
    "tts_max_waiting": (int, "clauses that may wait for a stream; more fail their reply at "
                             "once with an error", speech_server.DEFAULT_MAX_WAITING),
}
# the numbers that may be 0 (no waiting: past the streams a request fails at once);
# every other number must be above 0 (gateway.config_checks.check_model_servers)
MAY_BE_ZERO = frozenset({"llm_max_waiting", "asr_max_waiting", "tts_max_waiting"})


def env_name(name: str) -> str:
    return "DUPLEX_GATEWAY_" + name.upper()


def add_model_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(*MODEL_SERVER_GROUP)
    for name, (kind, text, default) in FLAGS.items():
        shown = "unset" if default is None else default
        group.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                           metavar=name.upper(),
                           help=f"{text} [env {env_name(name)}; default {shown}]")


def export_model_server_flags(args: argparse.Namespace,
                              environ: MutableMapping[str, str] = os.environ) -> None:
    """Put the flags given into the environment, where the plugin (and every
    worker) reads them; a flag wins over its variable."""
    for name in FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            environ[env_name(name)] = str(value)
