"""``serve --workers N``: N real gateway processes on one port and one embedded Valkey.

Each worker owns its sessions as a separate host would (``gateway.workers``): a
resume that reaches another worker is relayed to the owner through the owner's
own relay address, a worker that dies is started again and its sessions are
taken over, and SIGTERM to the parent stops every worker.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_ordered_exactly_once,
    meta,
    resume,
    seqs,
    start,
    turn_completes,
)
from gateway_process import REPO, GatewayProcess
from websockets.exceptions import InvalidMessage

WORKER_READY = re.compile(r"duplex-gateway worker (\d+) ready: pid (\d+), relays at ws://(\S+)")
REAPER = "0.5"  # a dead owner is presumed dead after 1.5 s
RESTART_WITHIN_S = 30.0
SPREAD_TRIES = 40  # sessions opened on the shared port until both workers own one


def workers(gw: GatewayProcess) -> dict[int, tuple[int, str]]:
    """Each worker's latest (pid, relay host:port), from the ready lines."""
    found: dict[int, tuple[int, str]] = {}
    for line in gw.output:
        if m := WORKER_READY.search(line):
            found[int(m.group(1))] = (int(m.group(2)), m.group(3))
    return found


def exited(pid: int) -> bool:
    """The process has ended (a zombie has closed every socket it held)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def store_url(gw: GatewayProcess) -> str:
    return f"unix://{gw.data_dir / 'valkey' / 'valkey.sock'}"


async def metric(address: str, name: str) -> float:
    async with httpx.AsyncClient(timeout=5.0) as http:
        text = (await http.get(f"http://{address}/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


async def opened(url: str) -> tuple[Stream, dict]:
    s = await Stream.open(url)
    await s.until_type("session.created")
    return s, s.messages[0].event


async def test_workers_share_the_port_and_a_resume_on_another_is_relayed_to_the_owner(
        gateways: GatewayFactory) -> None:
    gw = await start(gateways("--workers", "2", "--reaper-interval-s", REAPER))
    (pid0, at0), (pid1, at1) = workers(gw)[0], workers(gw)[1]
    # the kernel spreads connections to the shared port over both workers
    owners: set[str] = set()
    for _ in range(SPREAD_TRIES):
        s, created = await opened(gw.ws)
        owners.add((await meta(store_url(gw), created["session"]["id"]))["owner"])
        await s.close()
        if len(owners) == 2:
            break
    assert {o.split(":")[1] for o in owners} == {str(pid0), str(pid1)}

    s, created = await opened(f"ws://{at0}/v1/realtime")
    sid, token = created["session"]["id"], created["resume_token"]
    await turn_completes(s, turn=1)
    owner = (await meta(store_url(gw), sid))["owner"]
    assert owner.split(":")[1] == str(pid0)
    s.ws.transport.abort()
    await s.wait_closed()

    r, _, resumed = await resume(f"ws://{at1}/v1/realtime", sid, token, max(seqs(s.messages)))
    assert resumed["attachment_generation"] == 2
    assert resumed["recovered"] is False  # served by the live owner, nothing lost
    await turn_completes(r, turn=2)
    m = await meta(store_url(gw), sid)
    assert (m["owner"], m["incarnation"]) == (owner, "1")  # relayed, not taken over
    assert await metric(at1, "duplex_resumes_relayed_total") == 1
    assert await metric(at0, "duplex_resumes_relayed_total") == 0
    # each worker froze its start-up objects out of the collector's way once ready
    assert await metric(at0, "duplex_gc_frozen_objects") > 10_000
    assert await metric(at1, "duplex_gc_frozen_objects") > 10_000
    assert_ordered_exactly_once(s.messages + r.messages[1:])
    await r.close()


async def test_a_killed_worker_is_started_again_and_sigterm_stops_every_worker(
        gateways: GatewayFactory) -> None:
    gw = await start(gateways("--workers", "2", "--reaper-interval-s", REAPER,
                              "--shutdown-timeout-s", "2"))
    pid1, at1 = workers(gw)[1]
    at0 = workers(gw)[0][1]
    s, created = await opened(f"ws://{at1}/v1/realtime")
    sid, token = created["session"]["id"], created["resume_token"]
    await turn_completes(s, turn=1)

    os.kill(pid1, signal.SIGKILL)
    await s.wait_closed()
    # a connection the kernel queued on the dying worker's socket is reset with it
    # (SO_REUSEPORT does not move it): what is checked below starts once it is gone
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RESTART_WITHIN_S
    while not exited(pid1):
        assert loop.time() < deadline, "worker 1 did not die"
        await asyncio.sleep(0.01)
    # until the new worker 1 is ready the shared port is worker 0's alone: sessions
    # opened there all the while are admitted, none refused as not ready
    deadline = loop.time() + RESTART_WITHIN_S
    resets = 0
    while workers(gw)[1][0] == pid1:
        assert loop.time() < deadline, "worker 1 was not started again"
        try:
            w, _ = await opened(gw.ws)  # fails on an error event (not_ready)
        except InvalidMessage:
            # a connection the kernel reset during the restart, before any HTTP
            # answer (seen twice in CI, cause not pinned down): a client retries it
            resets += 1
            assert resets <= 2, "connections to the shared port keep being reset"
            continue
        await w.close()
    new_pid, new_at = workers(gw)[1]
    assert new_at == at1  # the same relay address: the parent keeps that socket
    owners: set[str] = set()
    for _ in range(SPREAD_TRIES):  # and the new worker takes its share again
        w, created = await opened(gw.ws)
        owners.add((await meta(store_url(gw), created["session"]["id"]))["owner"])
        await w.close()
        if any(o.split(":")[1] == str(new_pid) for o in owners):
            break
    assert any(o.split(":")[1] == str(new_pid) for o in owners)

    # the dead worker's session is taken over by a live one and goes on
    r, _, resumed = await resume(f"ws://{at0}/v1/realtime", sid, token, max(seqs(s.messages)))
    assert resumed["session"]["id"] == sid
    await turn_completes(r, turn=2)
    assert (await meta(store_url(gw), sid))["incarnation"] == "2"
    await r.close()

    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(timeout=15) == 0
    for pid in (workers(gw)[0][0], new_pid):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# A worker's interpreter that exits at once (a broken install, say): the parent's
# checks all pass (a bad certificate, which used to stand in, is refused before
# any worker starts), and every worker exits before it is ready.
BROKEN_WORKER = """import sys
if sys.orig_argv[-2:] == ["-m", "gateway.worker"]:
    sys.exit(1)
"""


def test_a_worker_that_cannot_start_stops_the_gateway(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN_WORKER)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--workers", "2", "--port", "0",
         "--plugin", "tone", "--data-dir", str(tmp_path / "d")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert re.search(r"worker \d exited with status 1 before it was ready", done.stderr)
    assert "duplex-gateway ready" not in done.stdout
