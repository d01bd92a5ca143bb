"""The embedded Valkey's supervisor: a server that dies is reaped and restarted on the
same AOF, with backoff while it will not start, and never after ``stop()``."""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store_embedded import read_last_seq, write_session

from duplex.store import EmbeddedValkey
from duplex.store.embedded import answers_ping
from duplex.store.supervisor import Restart, Supervisor, describe

RESTARTED = "restarted it on the same AOF"


@pytest.fixture
def server() -> Iterator[EmbeddedValkey]:
    with tempfile.TemporaryDirectory(prefix="dg-sup-") as d:  # short: sun_path limit
        server = EmbeddedValkey(Path(d))
        server.start()
        try:
            yield server
        finally:
            server.stop()


def reaped(pid: int) -> bool:
    """Gone from the process table: neither running nor a zombie."""
    return not Path(f"/proc/{pid}").exists()


def watched(server: EmbeddedValkey) -> tuple[Supervisor, list[Restart], threading.Event]:
    supervisor = Supervisor(server, first_delay_s=0.01, max_delay_s=0.04)
    restarts: list[Restart] = []
    restarted = threading.Event()

    def note(event: Restart) -> None:
        restarts.append(event)
        restarted.set()

    supervisor.on_restart.append(note)
    supervisor.start()
    return supervisor, restarts, restarted


class Failures(logging.Handler):
    """Counts the supervisor's failed restarts and the delays it announces."""

    def __init__(self, enough: int) -> None:
        super().__init__()
        self.delays: list[str] = []
        self.enough = threading.Event()
        self._wanted = enough

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "does not start again" in text:
            self.delays.append(text.split("next try in ")[1].split()[0])
            if len(self.delays) >= self._wanted:
                self.enough.set()


async def test_a_killed_server_is_reaped_and_restarted_on_the_same_aof(
        server: EmbeddedValkey, caplog: pytest.LogCaptureFixture) -> None:
    await write_session(server.url)
    supervisor, restarts, restarted = watched(server)
    old = server.pid
    assert old is not None
    with caplog.at_level(logging.INFO, logger="duplex.store"):
        os.kill(old, signal.SIGKILL)
        assert restarted.wait(10), "no restart"
        [event] = restarts
        assert (event.old_pid, event.status, event.count) == (old, -signal.SIGKILL, 1)
        assert event.new_pid == server.pid != old
        assert reaped(old), "the killed server is left a zombie"
        assert answers_ping(server.socket_path)
        assert server.pid_path.read_text().strip() == str(server.pid)
        assert await read_last_seq(server.url) == 1  # the AOF came back
        supervisor.stop()
    assert not answers_ping(server.socket_path)
    [line] = [r.getMessage() for r in caplog.records if RESTARTED in r.getMessage()]
    assert f"pid {old} killed by SIGKILL" in line and f"as pid {event.new_pid}" in line
    assert supervisor.restarts == 1  # stop() is not a death to restart from


async def test_a_server_that_will_not_start_is_retried_on_backoff(
        server: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    supervisor, restarts, restarted = watched(server)
    handler = Failures(3)
    logging.getLogger("duplex.store").addHandler(handler)
    try:
        monkeypatch.setenv("REDIS_SERVER_BIN", "/bin/false")  # exits at once, status 1
        assert server.pid is not None
        os.kill(server.pid, signal.SIGTERM)
        assert handler.enough.wait(10), "no three failed restarts"
        assert handler.delays[:3] == ["0.02", "0.04", "0.04"]  # doubling, up to the cap
        assert not restarted.is_set()
        monkeypatch.delenv("REDIS_SERVER_BIN")
        assert restarted.wait(10), "no restart once the server can start again"
        assert restarts[0].status == 0  # SIGTERM: a clean shutdown, exit status 0
        assert answers_ping(server.socket_path)
    finally:
        logging.getLogger("duplex.store").removeHandler(handler)
        supervisor.stop()


def test_stop_during_backoff_ends_at_once(server: EmbeddedValkey) -> None:
    supervisor = Supervisor(server, first_delay_s=60.0)
    supervisor.start()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    supervisor.stop(timeout_s=5.0)  # would wait the 60 s backoff out if it did not stop
    assert not supervisor.watching
    assert supervisor.restarts == 0 and server.pid is None


@pytest.mark.parametrize(("status", "text"), [
    (-signal.SIGKILL, "killed by SIGKILL"), (-99, "killed by signal 99"),
    (1, "exited with status 1"), (None, "exited"),
])
def test_exit_status_is_told_in_words(status: int | None, text: str) -> None:
    assert describe(status) == text
