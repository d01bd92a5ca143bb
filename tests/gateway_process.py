"""A real ``duplex-gateway serve`` process for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import httpx

from duplex.store.embedded import stop_child

READY = re.compile(r"duplex-gateway ready: https?://([^/]+)/")
LISTENING = re.compile(r"duplex-gateway listening: https?://([^/]+)/")
REPO = Path(__file__).resolve().parent.parent


class GatewayProcess:
    def __init__(self, data_dir: Path, *, args: Sequence[str] = (),
                 env: dict[str, str] | None = None, open_files: int | None = None) -> None:
        """``open_files``: its open-files limit, soft and hard (it cannot lift it)."""
        self.data_dir = data_dir
        self.open_files = open_files
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.env.pop("REDIS_URL", None) if "--redis-url" not in self.args and not (
            env and "REDIS_URL" in env) else None
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.output: list[str] = []

    @property
    def tls(self) -> bool:
        return "--ssl-certfile" in self.args

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}"

    @property
    def ws(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.address}/v1/realtime"

    def start(self, timeout_s: float = 60.0, *, wait_ready: bool = True) -> GatewayProcess:
        """Start it; return once it is ready (or, with ``wait_ready=False``, as soon
        as it listens: for gateways that must not become ready)."""
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", "0",
               "--data-dir", str(self.data_dir), *self.args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     preexec_fn=None if self.open_files is None
                                     else self._limit_open_files)
        ready = threading.Event()
        self._wait_ready = wait_ready
        threading.Thread(target=self._pump, args=(ready,), daemon=True).start()
        if not ready.wait(timeout_s) or not self.address:
            self.stop()
            raise RuntimeError("gateway did not become ready:\n" + "".join(self.output[-40:]))
        return self

    def _limit_open_files(self) -> None:
        if self.open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def _pump(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            match = READY.search(line) or (None if self._wait_ready else LISTENING.search(line))
            if match and not self.address:
                self.address = match.group(1)
                ready.set()
        ready.set()  # the process ended

    def _client(self) -> httpx.AsyncClient:
        """An HTTP client that trusts this gateway's own certificate when it has one."""
        if not self.tls:
            return httpx.AsyncClient(timeout=5.0)
        cert = self.args[self.args.index("--ssl-certfile") + 1]
        return httpx.AsyncClient(timeout=5.0, verify=ssl.create_default_context(cafile=cert))

    async def owner(self) -> str:
        """Its owner id in Redis, as ``/readyz`` names it."""
        async with self._client() as http:
            return str((await http.get(f"{self.http}/readyz")).json()["owner"])

    async def metric(self, name: str, **labels: str) -> float:
        """The sum of a ``/metrics`` sample's values over the samples that have
        ``labels`` (all of them, without)."""
        async with self._client() as http:
            text = (await http.get(f"{self.http}/metrics")).text
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith((name + " ", name + "{"))
                   and all(w in line.split("}")[0] for w in wanted))

    def kill(self) -> None:
        """SIGKILL: a crash. What the process measured for coverage is lost with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown, which saves its coverage data on the way out), then
        SIGKILL if it takes longer than 15 s."""
        if self.proc is not None:
            stop_child(self.proc)


def stop_all(procs: Iterable[GatewayProcess], timeout_s: float = 15.0) -> None:
    """``stop`` each of ``procs``, all at once: the shutdowns overlap."""
    running = [p.proc for p in procs if p.proc is not None and p.proc.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in running:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running(data_dir: Path, *args: str, env: dict[str, str] | None = None,
            timeout_s: float = 60.0) -> Iterator[GatewayProcess]:
    """A ready gateway with ``args``; stopped afterwards."""
    proc = GatewayProcess(data_dir, args=args, env=env)
    proc.start(timeout_s)
    try:
        yield proc
    finally:
        proc.stop()


def running_tone(data_dir: Path, *args: str,
                 env: dict[str, str] | None = None) -> contextlib.AbstractContextManager[
                     GatewayProcess]:
    """On the tone plugin, reply audio 300 ms ahead, plus ``args`` (a flag given again
    wins)."""
    return running(data_dir, "--plugin", "tone", "--output-lead-ms", "300", *args, env=env)


def running_cascade(data_dir: Path, *args: str) -> contextlib.AbstractContextManager[
        GatewayProcess]:
    """On the cascade plugin, offline, plus ``args`` (models warm: up to minutes)."""
    return running(data_dir, "--plugin", "cascade", *args, timeout_s=300,
                   env={"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
