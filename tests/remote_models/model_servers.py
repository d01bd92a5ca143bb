"""The model-server processes the remote-model tests start: ``fake_llm_server.py``
(deterministic, and slow, silent, refusing or down on command) and llama.cpp's own
HTTP server (``deploy/model_server.py``) on a GGUF the gateway ships."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent


class FakeServer:
    """``fake_llm_server.py`` as a process; ``stop`` and ``start`` again keep its port."""

    script = "fake_llm_server.py"

    def __init__(self, *args: str) -> None:
        self.args = args
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> FakeServer:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / self.script), *self.args, "--port", str(self.port)],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.port = int(line.split()[-1])
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def control(self, **settings: Any) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/control", json=settings).raise_for_status()

    def release(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/release").raise_for_status()

    def log(self) -> dict[str, Any]:
        answer = httpx.get(f"http://127.0.0.1:{self.port}/log")
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result


class LlamaCppServer(FakeServer):
    """``deploy/model_server.py``: llama.cpp's HTTP server on ``model`` (a GGUF
    path), the model server the clustered deployment runs."""

    script = str(HERE.parent.parent / "deploy" / "model_server.py")  # absolute: / keeps it


def shipped_model(name: str) -> str:
    """The path of a GGUF the gateway ships (``smollm2-135m-instruct``, or a
    bundled one: ``plugins.cascade.bundled``); skipped when it is not installed."""
    pytest.importorskip("xllamacpp", reason="the [cpu] extra (xllamacpp) is not installed")
    from plugins.cascade.llm import LlmChoice
    from plugins.cascade.model_cache import ModelCacheError

    try:
        return LlmChoice("llamacpp", name).prepare(print)
    except ModelCacheError as exc:
        pytest.skip(str(exc))


@contextmanager
def started(server: FakeServer) -> Iterator[FakeServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()
