"""I8 at the door: with the open-files limit at 1,024, a flood of 1,100
connections that never finish their request headers does not lock anyone out:
``/readyz`` answers and a Realtime client gets its session while the flood is
held open, because each newcomer closes the oldest connection still sending its
headers (``gateway.admission``)."""

from __future__ import annotations

import functools
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from client import RealtimeClient
from gateway_process import GatewayProcess, running_tone

OPEN_FILES = 1024
FLOOD = 1100
OLDEST = 10  # the flood's first connections: past the budget they go first


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # no limit per address: every connection comes from 127.0.0.1, as from a balancer
    proc = GatewayProcess(tmp_path_factory.mktemp("crowded"), open_files=OPEN_FILES, args=[
        "--plugin", "tone", "--header-timeout-s", "600",
        "--max-incomplete-per-address", "0"]).start()
    try:
        yield proc
    finally:
        proc.stop()


def flood(address: str, count: int, source: str = "") -> list[socket.socket]:
    """``count`` connections, one after another, that never finish a request:
    every other one sends nothing, the rest half a request line."""
    host, port = address.rsplit(":", 1)
    socks = []
    for i in range(count):
        sock = socket.create_connection((host, int(port)), timeout=60,
                                        source_address=(source, 0) if source else None)
        if i % 2:
            sock.sendall(b"GET /readyz HT")
        socks.append(sock)
    return socks


def floods(address: str, count: int, first: int) -> list[socket.socket]:
    """``first`` connections of a flood, then the rest of ``count`` from 8 threads
    at once (a connect that finds the gateway's accept queue full waits a second
    for its retry: in parallel those waits overlap)."""
    held = flood(address, first)
    per_thread, extra = divmod(count - first, 8)
    with ThreadPoolExecutor(8) as pool:
        for socks in pool.map(functools.partial(flood, address),
                              [per_thread + (i < extra) for i in range(8)]):
            held += socks
    return held


def closed_by_peer(sock: socket.socket) -> bool:
    """Waits for the gateway to close ``sock`` (its socket timeout bounds the wait)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


async def test_readiness_and_a_session_get_in_while_a_flood_is_held(
        crowded: GatewayProcess) -> None:
    held = floods(crowded.address, FLOOD, first=OLDEST)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            ready = await http.get(f"{crowded.http}/readyz")
        assert ready.status_code == 200, ready.text
        client = await RealtimeClient.connect(crowded.ws)
        try:
            assert (await client.recv())["type"] == "session.created"
        finally:
            await client.close()
        # the oldest went to let the newcomers in
        assert all(closed_by_peer(sock) for sock in held[:OLDEST])
        assert await crowded.metric("duplex_connections_shed_total", reason="full") >= (
            FLOOD - OPEN_FILES)
    finally:
        for sock in held:
            sock.close()
    said = "".join(crowded.output)
    assert "closed the oldest connection still sending its request headers" in said
    assert "Too many open files" not in said and "out of system resource" not in said


def test_one_address_loses_its_own_oldest_past_its_limit(tmp_path: Path) -> None:
    with running_tone(tmp_path, "--header-timeout-s", "600",
                      "--max-incomplete-per-address", "4") as proc:
        held = flood(proc.address, 6, source="127.0.0.2")
        try:
            assert closed_by_peer(held[0]) and closed_by_peer(held[1])
            assert httpx.get(f"{proc.http}/readyz", timeout=30).status_code == 200
        finally:
            for sock in held:
                sock.close()
    assert "closed the oldest connection from 127.0.0.2" in "".join(proc.output)
