"""The clustered deployment's model server: llama.cpp's own HTTP server on CPU,
from the ``xllamacpp`` wheel the gateway's ``cpu`` extra ships, as a process
of its own that many gateways share (``serve --llm-url http://HOST:PORT/v1``).

    python deploy/model_server.py [MODEL] [--host 0.0.0.0] [--port 8080]

MODEL is a GGUF file's path or the name of a model the gateway ships
(``qwen2.5-coder-1.5b-instruct``, the default thinker's, by default;
``smollm2-135m-instruct``). It prints ``listening on PORT`` once the model is
loaded, then serves until killed.

``xllamacpp`` wraps llama.cpp's server, ``llama-server``: given a port, it
listens on it with the same OpenAI-compatible routes (``/v1/chat/completions``
with tools through the model's own chat template, ``/v1/models``), and keeps
each slot's prompt cache, so a conversation's next turn prefills only its new
words. ``deploy/compose.clustered.yaml`` and ``tests/deploy`` run it; so do
the thinker's tests in ``tests/remote_models``. On a GPU fleet, run vLLM or
``llama-server`` itself instead: the gateways need only the URL.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading

import xllamacpp  # type: ignore[import-untyped,import-not-found,unused-ignore]

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                        help=f"a GGUF file, or a model the gateway ships (default {DEFAULT_MODEL})")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free one (printed)")
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot")
    parser.add_argument("--parallel", type=int, default=2, help="slots: replies generated at once")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    params = xllamacpp.CommonParams()
    params.model.path = _gguf(args.model)
    params.n_ctx = args.ctx * args.parallel
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_prompt = True
    params.use_jinja = True  # tools go through the model's own chat template
    params.hostnames = [args.host]
    params.port = args.port or _free_port(args.host)
    params.verbosity = -1
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address.rsplit(':', 1)[1]}", flush=True)
    threading.Event().wait()


def _gguf(model: str) -> str:
    """A GGUF path as given, or a shipped model's (joined from its part wheels)."""
    if os.path.exists(model):
        return model
    from plugins.cascade.llm import LlmChoice

    return str(LlmChoice("llamacpp", model).prepare(print))


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    main()
