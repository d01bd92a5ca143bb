"""The product as a newcomer gets it: the built wheel in a fresh virtual environment.

``build_wheel`` builds from a copy of the source tree (setuptools would leave
``build/`` behind in the checkout, and a stale ``build/lib`` can slip removed
files into the next wheel); ``fresh_venv`` installs the wheel with only its core
dependencies, resolved by pip from the package index; ``InstalledGateway`` runs
its ``duplex-gateway serve`` from a directory that holds no source at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from gateway_process import READY, REPO

from duplex.store.embedded import stop_child

PIP_TIMEOUT_S = 240
# what a checkout may hold that is not source (the gitignored names)
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".data", "build", "dist", "*.egg-info",
                                    "__pycache__", ".*_cache", ".hypothesis", "out",
                                    "test-output")


def index_unreachable() -> str | None:
    """Why pip cannot reach the package index, or None when it can."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(url, timeout=5):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


def _run(*cmd: str | Path, cwd: Path) -> None:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                         timeout=PIP_TIMEOUT_S, env=clean_env())
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed:\n{out.stdout}{out.stderr}")


def clean_env() -> dict[str, str]:
    """This environment minus what would point a child at the checkout or a store."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "REDIS_URL")
            and not k.startswith("DUPLEX_GATEWAY_")}


def build_wheel(work: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the checkout; the wheel's path."""
    source = work / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", ".", "-w", work / "dist",
         cwd=source)
    (wheel,) = (work / "dist").glob("duplex_gateway-*.whl")
    return wheel


def fresh_venv(work: Path, wheel: Path) -> Path:
    """A new virtual environment holding the wheel and its core dependencies."""
    venv = work / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=work)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=work)
    return venv


class InstalledGateway:
    """``VENV/bin/duplex-gateway serve`` on the tone plugin and the embedded Valkey."""

    def __init__(self, venv: Path, cwd: Path, *args: str) -> None:
        self.cmd = [str(venv / "bin" / "duplex-gateway"), "serve", "--plugin", "tone",
                    "--port", "0", "--data-dir", str(cwd / "data"), *args]
        self.cwd = cwd
        self.output: list[str] = []
        self.address = ""
        self._ready = threading.Event()
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout_s: float = 60.0) -> InstalledGateway:
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=clean_env(), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(timeout_s) or not self.address:
            self.stop()
            raise AssertionError("the installed gateway did not become ready:\n"
                                 + "".join(self.output[-40:]))
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if (match := READY.search(line)) and not self.address:
                self.address = match.group(1)
                self._ready.set()
        self._ready.set()  # it ended before it was ready

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)
