"""I8 in the HTTP layer: slow headers are cut off (slowloris), connections are
bounded (the oldest still sending headers goes first; probes are always
answered), sessions per address are bounded, and SIGTERM ends within its bound even with a
client that stops reading."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from client import RealtimeClient, expect_error
from gateway_process import GatewayProcess, running_tone


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("limited"), "--header-timeout-s", "1",
                      "--max-sessions-per-address", "2") as proc:
        yield proc


def dribble(address: str) -> socket.socket:
    """A connection that sends half a request line and then nothing (slowloris)."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    return sock


def test_slow_headers_are_cut_off_and_others_are_served(limited: GatewayProcess) -> None:
    slow = [dribble(limited.address) for _ in range(20)]
    try:
        assert httpx.get(f"{limited.http}/healthz", timeout=5).status_code == 200
        for sock in slow:
            # closed by the gateway, with nothing said (a socket the gateway never
            # closed would time out here: 10 s, ten times the header deadline)
            assert sock.recv(1024) == b""
    finally:
        for sock in slow:
            sock.close()
    # the log line is read from the gateway's output by another thread: wait for it
    # (the deadline only bounds a failing run)
    said = "no complete request headers within 1 s"
    deadline = time.monotonic() + 30
    while not any(said in line for line in limited.output) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(said in line for line in limited.output)


async def test_sessions_per_address_are_bounded(limited: GatewayProcess) -> None:
    clients = [await RealtimeClient.connect(limited.ws) for _ in range(2)]
    try:
        for c in clients:
            await c.until("session.created")
        third = await RealtimeClient.connect(limited.ws)
        refusal = await expect_error(third, "resource_exhausted")
        assert "from this address" in refusal["error"]["message"]
        await asyncio.wait_for(third.ws.wait_closed(), 5)
        assert third.ws.close_code == 1013
        await clients[0].send("session.close")
        await clients[0].until("session.closed")
        for _ in range(50):  # the slot frees once the session's cleanup ran: no event
            again = await RealtimeClient.connect(limited.ws)
            first = await again.recv()
            await again.close()
            if first["type"] == "session.created":
                break
            await asyncio.sleep(0.05)
        assert first["type"] == "session.created"
    finally:
        for c in clients:
            await c.close()


async def test_at_the_connection_limit_the_oldest_waiting_goes_then_503(
        tmp_path: Path) -> None:
    with running_tone(tmp_path, "--max-connections", "3", "--header-timeout-s", "30") as proc:
        held = [dribble(proc.address) for _ in range(3)]
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                assert (await http.get(f"{proc.http}/")).status_code == 200
            assert held[0].recv(1024) == b""  # the oldest still sending headers went
        finally:
            for sock in held:
                sock.close()
        sessions = [await RealtimeClient.connect(proc.ws) for _ in range(3)]
        try:
            for c in sessions:
                await c.until("session.created")
            # nothing left to shed: a request is refused, a probe still answered
            async with httpx.AsyncClient(timeout=5) as http:
                assert (await http.get(f"{proc.http}/")).status_code == 503
                assert (await http.get(f"{proc.http}/healthz")).status_code == 200
                assert (await http.get(f"{proc.http}/readyz")).status_code == 200
        finally:
            for c in sessions:
                await c.close()


async def test_sigterm_ends_within_its_bound_with_a_client_that_stops_reading(
        tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path, args=["--plugin", "tone", "--output-lead-ms", "60000",
                                          "--shutdown-timeout-s", "2"]).start()
    try:
        ws = await websockets.connect(proc.ws)
        created = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "session.update",
                                  "session": {"instructions": "words=400"}}))
        await ws.send(json.dumps({"type": "response.create"}))
        ws.transport.pause_reading()  # the reply backs up on the gateway's side
        await asyncio.sleep(1.0)  # let it fill the socket buffers (no event for that)
        assert proc.proc is not None
        t0 = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.proc.wait, 20)
        assert time.monotonic() - t0 < 8, "SIGTERM did not finish within its bound"
        assert created["type"] == "session.created"
    finally:
        proc.kill()
