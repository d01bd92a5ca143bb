"""The embedded Valkey launcher: readiness, AOF durability, orphans, dying with its parent."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import OWNER, open_session

from duplex.errors import StoreUnavailable
from duplex.store import EmbeddedValkey, RedisSessionStore, connect
from duplex.store.embedded import answers_ping

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from pathlib import Path
from duplex.store import EmbeddedValkey
server = EmbeddedValkey(Path(sys.argv[1]))
server.start()
print(server.pid, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dg-emb-") as d:  # short: sun_path limit
        yield Path(d)


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaps counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def write_session(url: str) -> None:
    store = RedisSessionStore(connect(url))
    try:
        await open_session(store)
        await store.append_events("s1", OWNER, 1, [(1, "a")], max_len=100)
    finally:
        await store.close()


async def read_last_seq(url: str) -> int | None:
    store = RedisSessionStore(connect(url))
    try:
        rec = await store.get("s1")
        return None if rec is None else rec.last_seq
    finally:
        await store.close()


async def test_start_answers_ping_and_stop_ends_it(data_dir: Path) -> None:
    server = EmbeddedValkey(data_dir)
    url = server.start()
    assert url == f"unix://{data_dir}/valkey.sock"
    assert server.start() == url  # already running: same server
    pid = server.pid
    assert pid is not None and answers_ping(server.socket_path)
    server.stop()
    assert gone(pid) and not answers_ping(server.socket_path)
    server.stop()  # twice: harmless


@pytest.mark.parametrize("how", ["stop", "crash"])
async def test_data_survives_a_restart(data_dir: Path, how: str) -> None:
    first = EmbeddedValkey(data_dir)
    await write_session(first.start())
    if how == "crash":
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)  # AOF is written before the reply
    first.stop()
    second = EmbeddedValkey(data_dir)
    try:
        assert await read_last_seq(second.start()) == 1
    finally:
        second.stop()


async def test_an_orphan_on_the_socket_is_retired_keeping_its_data(data_dir: Path) -> None:
    orphan = EmbeddedValkey(data_dir)
    await write_session(orphan.start())
    orphan_pid = orphan.pid
    assert orphan_pid is not None
    fresh = EmbeddedValkey(data_dir)  # as after a crash that left the old server running
    try:
        fresh.start()
        assert wait_gone(orphan_pid) and fresh.pid != orphan_pid
        assert await read_last_seq(fresh.url) == 1
    finally:
        fresh.stop()
        orphan.stop()


def test_server_dies_when_its_parent_is_sigkilled(data_dir: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir)], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    valkey_pid = None
    try:
        assert parent.stdout is not None
        ready, _, _ = select.select([parent.stdout], [], [], 20)
        assert ready, "child did not report the server pid"
        valkey_pid = int(parent.stdout.readline())
        assert not gone(valkey_pid)
        parent.kill()
        parent.wait()
        assert wait_gone(valkey_pid), "valkey outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()
        if valkey_pid is not None and not gone(valkey_pid):
            os.kill(valkey_pid, signal.SIGKILL)


def test_start_failure_reports_the_log(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_SERVER_BIN", "/bin/false")
    with pytest.raises(StoreUnavailable, match="exited with 1"):
        EmbeddedValkey(data_dir).start()


def test_socket_path_too_long_is_a_clear_error(data_dir: Path) -> None:
    with pytest.raises(StoreUnavailable, match="too long"):
        EmbeddedValkey(data_dir / ("d" * 120)).start()
