"""Issue: a newcomer's first hour. The gateway answers /healthz and /readyz while
its models load, and its log is one readable line per event: no access line per
poll, JSON on request with the session id."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
from client import RealtimeClient
from gateway_process import GatewayProcess, running_tone

SLOW = "tests.one_stage.slow_plugin:SlowPlugin"


def test_readyz_says_what_loads_from_the_first_second(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    proc = GatewayProcess(tmp_path / "data", args=["--plugin", SLOW],
                          env={**os.environ, "DUPLEX_TEST_LOAD_GATE": str(gate)})
    proc.start(wait_ready=False)
    try:
        with httpx.Client(base_url=proc.http, timeout=5) as http:
            assert http.get("/healthz").status_code == 200
            reason = ""
            for _ in range(200):  # the load reports its step a moment after start
                answer = http.get("/readyz")
                assert answer.status_code == 503
                reason = answer.json()["reason"]
                if "gate" in reason:
                    break
                time.sleep(0.05)
            assert reason == "loading: [1/1] waiting for the test's gate", reason
            gate.touch()
            for _ in range(200):  # now it gets ready
                if http.get("/readyz").status_code == 200:
                    break
                time.sleep(0.05)
            assert http.get("/readyz").status_code == 200
        for _ in range(100):  # the ready line follows at the announcer's next look
            if any("duplex-gateway ready:" in line for line in proc.output):
                break
            time.sleep(0.05)
        assert any("duplex-gateway ready:" in line for line in proc.output)
    finally:
        proc.stop()


async def test_polls_are_not_access_logged_and_json_lines_name_the_session(
        tmp_path: Path) -> None:
    with running_tone(tmp_path, "--log-format", "json") as proc:
        async with httpx.AsyncClient(base_url=proc.http, timeout=5) as http:
            for _ in range(5):
                await http.get("/readyz")
                await http.get("/healthz")
            await http.get("/nothing-here")
        c = await RealtimeClient.connect(proc.ws)
        await c.until("session.created")
        await c.send("session.close")
        await c.until("session.closed")
        await c.close()
    lines = [json.loads(line) for line in proc.output if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert not any("/readyz" in m or "/healthz" in m for m in messages), messages
    assert any("/nothing-here" in m for m in messages)  # other requests still are
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert not any("send failed" in m for m in messages)  # a clean close is not news
