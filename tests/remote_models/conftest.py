"""Models on their own servers: the gateway's thinker on an OpenAI-compatible
server it reaches over HTTP (``--llm-url``), against real server processes
started here — ``fake_llm_server.py`` (deterministic, and slow, silent,
refusing or down on command) and llama.cpp's own HTTP server on CPU
(``deploy/model_server.py``, skipped without xllamacpp).
"""

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
# the end-to-end tests reuse the realtime client of tests/e2e
_E2E = str(HERE.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from client import RealtimeClient, eventually  # noqa: E402
from gateway_process import GatewayProcess, running_cascade  # noqa: E402


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


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    with started(FakeServer()) as server:
        yield server


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    """One fake server for a whole module: the one its ``gateway`` reaches."""
    with started(FakeServer()) as fake:
        yield fake


def cascade_gateway(*flags: str, url_flags: tuple[str, ...] = ("--llm-url",)) -> Any:
    """A module's ``gateway`` fixture (``gateway = cascade_gateway(...)``): the cascade
    in a gateway process that reaches the module's ``server`` through each of
    ``url_flags``, with ``flags`` besides; one for the whole module (models warm up
    once)."""

    @pytest.fixture(scope="module")
    def gateway(server: FakeServer, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[GatewayProcess]:
        urls = [arg for flag in url_flags for arg in (flag, server.url)]
        with running_cascade(Path(tmp_path_factory.mktemp("cascade")), *urls, *flags) as proc:
            yield proc

    return gateway


async def typed(c: RealtimeClient, text: str) -> dict[str, Any]:
    """A typed user turn and the reply it asks for: the ``response.done``'s response."""
    await c.send("conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    await c.send("response.create")
    done: dict[str, Any] = (await c.until("response.done", timeout=60))["response"]
    return done


async def cancel_mid_reply(ws_url: str, text: str, instructions: str | None = None) -> None:
    """Ask for a reply by text, cancel it at its first audio, and see it cancelled."""
    c = await RealtimeClient.connect(ws_url)
    try:
        await c.recv()
        if instructions is not None:
            await c.send("session.update", session={"instructions": instructions})
            await c.until("session.updated")
        await c.send("conversation.item.create", item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})
        await c.send("response.create")
        await c.until("response.output_audio.delta", timeout=60)
        await c.send("response.cancel")
        done = await c.until("response.done", timeout=30)
        assert done["response"]["status"] == "cancelled"
    finally:
        await c.close()


async def one_more_drop(server: FakeServer, counter: str, before: int) -> None:
    """Wait until the server has seen one more dropped stream than ``before`` (it
    learns of a drop on its own loop), and no more than one."""
    async def grown() -> int:
        return int(server.log()[counter] > before)

    await eventually(grown, 20, f"the server's {counter} past {before}")
    assert server.log()[counter] == before + 1
