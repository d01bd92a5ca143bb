"""llama.cpp's own HTTP server on CPU, as a process of its own:
``python llamacpp_server.py MODEL.gguf`` prints ``listening on PORT`` once the
model is loaded, then serves until killed.

``xllamacpp`` wraps llama.cpp's server, ``llama-server``: given a port, it
listens on it with the same OpenAI-compatible routes (``/v1/chat/completions``
with tools through the model's own chat template, ``/v1/models``), so this is
the server a deployment would run, started from the wheel the gateway ships.
"""

from __future__ import annotations

import argparse
import threading

import xllamacpp  # type: ignore[import-untyped,import-not-found,unused-ignore]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ctx", type=int, default=4096, help="per slot")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx * args.parallel
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_prompt = True
    params.use_jinja = True  # tools go through the model's own chat template
    params.hostnames = ["127.0.0.1"]
    params.port = args.port or _free_port()
    params.verbosity = -1
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address.rsplit(':', 1)[1]}", flush=True)
    threading.Event().wait()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    main()
