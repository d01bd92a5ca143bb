"""The clients' own environments, installed from the registries on first use and cached.

- npm: ``node/package-lock.json`` pins every package; ``npm ci`` installs it into
  ``node/node_modules`` (git-ignored), again only when the lockfile changed.
- Python: each client gets a virtual environment of its own (their pins clash:
  pipecat wants ``protobuf<7``, ``openai[realtime]`` wants ``websockets<16``), under
  ``.cache/<name>-<hash of requirements-<name>.txt>``, made once per requirements file.

Without ``npm`` or a reachable registry the tier skips, saying why; in CI (``CI=true``,
or ``DUPLEX_CLIENT_TESTS=required``) it fails instead, as ``tests/install`` does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "node"
CACHE = HERE / ".cache"
PYTHON_CLIENTS = ("openai", "pipecat", "livekit", "agents")
INSTALL_TIMEOUT_S = 300
NPM_REGISTRY = "https://registry.npmjs.org/"


class Unavailable(Exception):
    """A client environment cannot be set up here (no npm, no registry)."""


def required() -> bool:
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("DUPLEX_CLIENT_TESTS") == "required")


def unavailable(why: str) -> None:
    """Skip the test, or in CI fail it: a tier that skips there tests nothing."""
    if required():
        pytest.fail(f"{why}; the client tier needs it in CI")
    pytest.skip(why)


def _unreachable(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=INSTALL_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")


def npm_install() -> float:
    """``npm ci`` unless ``node_modules`` already holds this lockfile; seconds spent."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise Unavailable(f"`{tool}` is not installed (apt-get install nodejs npm)")
    stamp = NODE_DIR / "node_modules" / ".lock-digest"
    lock = _digest(NODE_DIR / "package-lock.json")
    if stamp.is_file() and stamp.read_text() == lock:
        return 0.0
    if (why := _unreachable(NPM_REGISTRY)) is not None:
        raise Unavailable(f"the npm registry is unreachable ({why})")
    start = time.monotonic()
    _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], NODE_DIR)
    stamp.write_text(lock)
    return time.monotonic() - start


def venv_install(name: str) -> tuple[Path, float]:
    """The python of ``name``'s virtual environment (made if missing); seconds spent."""
    requirements = HERE / f"requirements-{name}.txt"
    venv = CACHE / f"{name}-{_digest(requirements)}"
    python = venv / "bin" / "python"
    if (venv / ".installed").is_file():
        return python, 0.0
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/pip/"
    if (why := _unreachable(index)) is not None:
        raise Unavailable(f"the package index is unreachable ({why})")
    start = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
    _run([sys.executable, "-m", "venv", str(venv)], HERE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)], HERE, env)
    (venv / ".installed").write_text(requirements.name)
    return python, time.monotonic() - start


class Installs:
    """The client environments this run's tests need, installed side by side (mostly
    network and unpacking: the wall time is about the slowest one's); each test waits
    for its own. ``wanted`` names them: ``npm`` and those of ``PYTHON_CLIENTS``."""

    def __init__(self, wanted: set[str]) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1 + len(PYTHON_CLIENTS))
        self._futures: dict[str, Future[tuple[Path, float]]] = {}
        for name in sorted(wanted):
            self._start(name)

    def _start(self, name: str) -> Future[tuple[Path, float]]:
        if name not in self._futures:
            job = (lambda: (NODE_DIR, npm_install())) if name == "npm" else (
                lambda: venv_install(name))
            self._futures[name] = self._pool.submit(job)
        return self._futures[name]

    def node(self) -> Path:
        return _result(self._start("npm"))[0]

    def python(self, name: str) -> Path:
        return _result(self._start(name))[0]

    def seconds(self) -> dict[str, float]:
        """Install time per environment (0 when it was cached), for those done."""
        return {name: f.result()[1] for name, f in self._futures.items()
                if f.done() and f.exception() is None}

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _result(future: Future[T]) -> T:
    try:
        return future.result(timeout=INSTALL_TIMEOUT_S + 60)
    except Unavailable as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() skips or fails
