"""Issue 27, "operators get one-line answers": ``duplex-gateway serve`` as a
newcomer runs it. A bad flag is one line and status 2 before anything starts;
Ctrl-C stops it as SIGTERM does, without a traceback, with and without
``--workers``; each socket's close is logged as its open is; the demo has its icon."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from client import RealtimeClient
from gateway_process import REPO, GatewayProcess, running_tone

SLOW = "tests.one_stage.slow_plugin:SlowPlugin"
LOADING = "[1/1] waiting for the test's gate"


def serve(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run([sys.executable, "-m", "gateway.cli", "serve", *map(str, args)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("flags", "needle"), [
    (["--plugin", "nope"], "--plugin 'nope' is not a plugin"),
    (["--port", "99999"], "--port must be between 0 and 65535"),
    (["--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
    (["--max-message-bytes", "-1"], "--max-message-bytes must be above 0"),
    (["--ssl-certfile", "BAD", "--ssl-keyfile", "BAD"], "not a PEM certificate and its key"),
    (["--loop", "trio"], "--loop must be one of"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_a_bad_flag_is_one_line_and_status_2_before_anything_starts(
        tmp_path: Path, flags: list[str], needle: str) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    data_dir = tmp_path / "data"
    out = serve("--data-dir", data_dir, *[str(bad) if f == "BAD" else f for f in flags])
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    [line] = out.stderr.splitlines()  # one line says it all: no usage block, no traceback
    assert line.startswith("duplex-gateway"), line
    assert needle in line, line
    assert not data_dir.exists()  # the store was never started


def wait_for(proc: GatewayProcess, text: str) -> None:
    for _ in range(600):  # the line follows the listening line by a moment
        if any(text in line for line in proc.output):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} in:\n" + "".join(proc.output))


def ended_quietly(proc: GatewayProcess, how: signal.Signals) -> int:
    """Send ``how`` and wait for the process to end; its exit status. The output
    must hold no traceback, and the embedded Valkey must not have seen the signal."""
    assert proc.proc is not None
    proc.proc.send_signal(how)
    status = proc.proc.wait(timeout=60)  # a hang guard, not a timing
    text = "".join(proc.output)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "restarted it" not in text, text  # Valkey got no Ctrl-C of its own
    return status


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_the_models_load_ends_it_as_sigterm_does(
        tmp_path: Path, how: signal.Signals) -> None:
    # the load never ends: a Ctrl-C used to wait for it, then print a traceback
    proc = GatewayProcess(tmp_path / "data", args=["--plugin", SLOW],
                          env={"DUPLEX_TEST_LOAD_GATE": str(tmp_path / "never")})
    proc.start(wait_ready=False)
    try:
        wait_for(proc, LOADING)
        status = ended_quietly(proc, how)
    finally:
        proc.stop()
    # SIGTERM's action (coverage's handler, when measured, ends it by SIGTERM too)
    assert status in (-signal.SIGTERM, -how), status


def test_ctrl_c_stops_every_worker_as_sigterm_does(tmp_path: Path) -> None:
    with running_tone(tmp_path / "data", "--workers", "2") as proc:
        status = ended_quietly(proc, signal.SIGINT)
    assert status == 0  # as after SIGTERM (tests/faults/test_workers.py)
    assert "duplex-gateway ready" in "".join(proc.output)


def test_progress_lines_are_logged_once(tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path / "data", args=["--plugin", SLOW],
                          env={"DUPLEX_TEST_LOAD_GATE": str(tmp_path / "gate")})
    proc.start(wait_ready=False)
    try:
        wait_for(proc, LOADING)
        (tmp_path / "gate").touch()
        wait_for(proc, "duplex-gateway ready:")
    finally:
        proc.stop()
    assert sum(LOADING in line for line in proc.output) == 1, "".join(proc.output)


async def test_each_socket_close_is_logged_with_its_code(tmp_path: Path) -> None:
    with running_tone(tmp_path / "data") as proc:
        by_client = await RealtimeClient.connect(proc.ws)
        await by_client.until("session.created")
        await by_client.ws.close(1000)
        dropped = await RealtimeClient.connect(proc.ws)
        await dropped.until("session.created")
        dropped.ws.transport.abort()  # no close frame
        # the abort closes the socket at the loop's next turn: let it run meanwhile
        await asyncio.to_thread(wait_for, proc, "closed 1000 by the client")
        await asyncio.to_thread(wait_for, proc, "closed 1006: the connection dropped")
    closes = [line for line in proc.output if '"WebSocket /v1/realtime" closed' in line]
    opens = [line for line in proc.output if '"WebSocket /v1/realtime" [accepted]' in line]
    assert len(closes) == len(opens) == 2, "".join(proc.output)


async def test_the_demo_has_its_icon(tmp_path: Path) -> None:
    with running_tone(tmp_path / "data") as proc:
        async with httpx.AsyncClient(base_url=proc.http, timeout=5) as http:
            icon = await http.get("/favicon.ico")
            page = await http.get("/")
    assert icon.status_code == 200
    assert icon.content.startswith(b"\0\0\1\0")  # an ICO file's header
    assert '<link rel="icon" href="favicon.ico">' in page.text
