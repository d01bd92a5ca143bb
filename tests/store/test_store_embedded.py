"""The embedded Valkey launcher: readiness, AOF durability, one owner per data dir,
stale servers, dying with its parent."""

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
from duplex.store.dirlock import DataDirInUse
from duplex.store.embedded import answers_ping

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from pathlib import Path
import duplex.store.embedded as embedded
if sys.argv[2] == "no-pdeathsig":  # as on macOS: the server outlives its owner
    embedded.die_with_parent = lambda: None
server = embedded.EmbeddedValkey(Path(sys.argv[1]))
server.start()
print(server.pid, flush=True)
sys.stdin.read()
"""


class Owner:
    """Another process that owns an embedded Valkey on ``data_dir`` (``CHILD``)."""

    def __init__(self, data_dir: Path, *, pdeathsig: bool = True) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data_dir),
             "pdeathsig" if pdeathsig else "no-pdeathsig"],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "the owner did not report its server's pid"
        self.valkey_pid = int(self.proc.stdout.readline())

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        if not gone(self.valkey_pid):
            os.kill(self.valkey_pid, signal.SIGKILL)


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


async def test_a_second_owner_is_refused_and_never_touches_the_first(data_dir: Path) -> None:
    first = Owner(data_dir)
    try:
        url = f"unix://{data_dir}/valkey.sock"
        await write_session(url)
        second = EmbeddedValkey(data_dir)
        with pytest.raises(DataDirInUse, match=f"{data_dir} is in use by pid ") as refused:
            second.start()
        assert refused.value.holder == first.proc.pid
        assert second.pid is None  # it started nothing
        second.stop()  # harmless: it holds nothing, so the owner's lock stays
        assert not gone(first.valkey_pid) and answers_ping(data_dir / "valkey.sock")
        assert await read_last_seq(url) == 1
        with pytest.raises(DataDirInUse):  # still held after the refused one's stop()
            EmbeddedValkey(data_dir).start()
    finally:
        first.close()


async def test_a_stale_server_of_a_dead_owner_is_retired_keeping_its_data(
        data_dir: Path) -> None:
    owner = Owner(data_dir, pdeathsig=False)
    try:
        await write_session(f"unix://{data_dir}/valkey.sock")
        owner.kill()  # its lock goes with it; its server stays, as without PDEATHSIG
        assert not gone(owner.valkey_pid)
        fresh = EmbeddedValkey(data_dir)
        try:
            fresh.start()
            assert wait_gone(owner.valkey_pid) and fresh.pid != owner.valkey_pid
            assert await read_last_seq(fresh.url) == 1
        finally:
            fresh.stop()
    finally:
        owner.close()


async def test_a_sigkilled_owners_data_dir_is_taken_at_once(data_dir: Path) -> None:
    owner = Owner(data_dir)
    try:
        await write_session(f"unix://{data_dir}/valkey.sock")
        owner.kill()  # no wait for its server to go: the lock went with the owner
        fresh = EmbeddedValkey(data_dir)
        try:
            fresh.start()
            assert wait_gone(owner.valkey_pid)
            assert await read_last_seq(fresh.url) == 1
        finally:
            fresh.stop()
    finally:
        owner.close()


def test_server_dies_when_its_parent_is_sigkilled(data_dir: Path) -> None:
    owner = Owner(data_dir)
    try:
        assert not gone(owner.valkey_pid)
        owner.kill()
        assert wait_gone(owner.valkey_pid), "valkey outlived its SIGKILLed parent"
    finally:
        owner.close()


def test_start_failure_reports_the_log(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_SERVER_BIN", "/bin/false")
    with pytest.raises(StoreUnavailable, match="exited with 1"):
        EmbeddedValkey(data_dir).start()


def test_socket_path_too_long_is_a_clear_error(data_dir: Path) -> None:
    with pytest.raises(StoreUnavailable, match="too long"):
        EmbeddedValkey(data_dir / ("d" * 120)).start()
