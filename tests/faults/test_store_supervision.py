"""The embedded Valkey under a real gateway: killed, it is restarted and sessions go on;
a store gone too long fails ``/healthz``; a data dir has one owner.

docs/store.md "The embedded store". The server's pid is in ``<data-dir>/valkey/valkey.pid``
(the server writes it); the gateway logs one line per restart.
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
from client import eventually
from fault_helpers import (
    GatewayFactory,
    Stream,
    assert_ordered_exactly_once,
    meta,
    start,
    turn_completes,
)
from gateway_process import REPO, GatewayProcess
from redis_server import RedisServer

from duplex.store.embedded import answers_ping

RESTARTED = re.compile(r"embedded Valkey pid (\d+) killed by SIGKILL; restarted it on the "
                       r"same AOF as pid (\d+) in ([\d.]+) s \(restart 1\)")


def valkey_pid(data_dir: Path) -> int:
    return int((data_dir / "valkey" / "valkey.pid").read_text())


def process_state(pid: int) -> str | None:
    """``R``, ``S``, ``Z`` (a zombie: exited, not reaped) …; None once reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return re.search(r"^State:\s+(\S)", status, re.M)[1]  # type: ignore[index]


def restart_lines(gw: GatewayProcess) -> list[str]:
    return [line for line in gw.output if "restarted it on the same AOF" in line]


async def healthz(gw: GatewayProcess) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5.0) as http:
        return await http.get(f"{gw.http}/healthz")


async def test_a_killed_embedded_valkey_is_restarted_and_the_session_goes_on(
        gateways: GatewayFactory, data_dir: Path) -> None:
    gw = gateways(data_dir=data_dir).start()
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    await turn_completes(s, turn=1, words=3)
    old = valkey_pid(data_dir)

    os.kill(old, signal.SIGKILL)

    async def restarted() -> list[str]:
        return restart_lines(gw)

    [line] = await eventually(restarted, 10, "the restart's log line")
    match = RESTARTED.search(line)
    assert match, line
    assert int(match[1]) == old
    new = int(match[2])
    assert new != old and valkey_pid(data_dir) == new and process_state(new) in ("R", "S")
    assert process_state(old) is None, f"the killed server is {process_state(old)}, not reaped"
    assert answers_ping(data_dir / "valkey" / "valkey.sock")
    print(f"restart took {match[3]} s")

    # the session that was open before the kill goes on, on the same socket
    await turn_completes(s, turn=2, words=3)
    assert_ordered_exactly_once(s.messages)
    record = await meta(f"unix://{data_dir / 'valkey' / 'valkey.sock'}", sid)
    assert record["state"] == "open" and record["owner"] == await gw.owner()
    assert await gw.metric("duplex_store_restarts_total") == 1
    assert len(restart_lines(gw)) == 1  # logged once
    assert (await healthz(gw)).status_code == 200
    await s.close()

    # the restarted server, forked by the supervisor's thread, still dies with the gateway
    gw.kill()

    async def died() -> bool:
        return process_state(new) in (None, "Z")

    await eventually(died, 10, "the restarted server dying with its SIGKILLed gateway")


async def test_healthz_fails_once_the_store_is_down_longer_than_the_bound(
        aof_redis: RedisServer, gateways: GatewayFactory) -> None:
    bound_s = 2.0
    gw = gateways("--redis-url", aof_redis.url, "--store-down-unhealthy-s", str(bound_s),
                  "--reaper-interval-s", "0.2").start()
    loop = asyncio.get_running_loop()
    assert (await healthz(gw)).status_code == 200

    aof_redis.kill()
    killed_at = loop.time()
    assert (await healthz(gw)).status_code == 200  # a blip is not a reason to restart
    async with httpx.AsyncClient(timeout=5.0) as http:
        ready = await http.get(f"{gw.http}/readyz")
    assert ready.status_code == 503 and "store unreachable" in ready.json()["reason"]

    async def failing() -> httpx.Response | None:
        response = await healthz(gw)
        return response if response.status_code == 503 else None

    response = await eventually(failing, 15, "/healthz answering 503")
    failed_after = loop.time() - killed_at
    # not at once: the bound counts from the last answer, at most a ping interval before
    assert failed_after > bound_s / 2, failed_after
    assert response.json()["status"] == "unhealthy"
    assert "store unreachable for" in response.json()["reason"]

    await asyncio.to_thread(aof_redis.start)

    async def passing() -> bool:
        return (await healthz(gw)).status_code == 200

    await eventually(passing, 10, "/healthz answering 200 again")


async def test_healthz_fails_when_the_store_never_answered(gateways: GatewayFactory) -> None:
    gw = gateways("--redis-url", "unix:///nonexistent/dg.sock",
                  "--store-down-unhealthy-s", "1").start(wait_ready=False)

    async def failing() -> bool:
        return (await healthz(gw)).status_code == 503

    await eventually(failing, 15, "/healthz answering 503")


def serve_once(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--plugin", "tone",
         "--data-dir", str(data_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)


async def test_a_second_gateway_on_the_data_dir_is_refused(
        gateways: GatewayFactory, data_dir: Path) -> None:
    first = gateways(data_dir=data_dir).start()
    assert first.proc is not None
    s = await Stream.open(first.ws)
    await s.until_type("session.created")
    server = valkey_pid(data_dir)

    second = await asyncio.to_thread(serve_once, data_dir)

    assert second.returncode == 2  # as for a bad flag: nothing started, nothing to retry
    assert second.stdout == ""
    [line] = second.stderr.splitlines()  # one line says it all
    sock = data_dir / "valkey" / "valkey.sock"
    assert line == (f"duplex-gateway: the data dir {data_dir} is in use by another gateway "
                    f"(pid {first.proc.pid}); give this one its own --data-dir, or share "
                    f"that gateway's store with --redis-url unix://{sock}"), line
    # the first gateway's server was not touched: same process, same socket, still serving
    assert valkey_pid(data_dir) == server and process_state(server) in ("R", "S")
    assert not restart_lines(first)
    await turn_completes(s, turn=1, words=3)
    await s.close()


async def test_a_sigkilled_gateways_data_dir_is_reused_at_once(
        gateways: GatewayFactory, data_dir: Path) -> None:
    a = gateways(data_dir=data_dir).start()
    s = await Stream.open(a.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    server = valkey_pid(data_dir)

    a.kill()  # its lock goes with it; its server gets SIGTERM (PDEATHSIG) and flushes

    b = await start(gateways(data_dir=data_dir))
    assert valkey_pid(data_dir) != server and process_state(server) in (None, "Z")
    record = await meta(f"unix://{data_dir / 'valkey' / 'valkey.sock'}", sid)
    assert record["state"] == "open"  # A's session is in B's store: the same AOF
    c = await Stream.open(b.ws)
    await turn_completes(c, turn=1, words=3)
    await c.close()
