"""The pieces of ``engines.model_http`` that need no server: where an API
lives, server-sent events cut anywhere, and the gate's bounds."""

from __future__ import annotations

import asyncio

import pytest

from engines.model_http import (
    Endpoint,
    ServerBusy,
    ServerDown,
    ServerGate,
    ServerSilent,
    failures,
    server_events,
)


def test_an_endpoint_is_read_from_the_api_base() -> None:
    assert Endpoint.parse("http://gpu-1:8000/v1/") == Endpoint("gpu-1", 8000, False, "/v1")
    assert Endpoint.parse("https://api.example.com/v1") == Endpoint("api.example.com", 443,
                                                                     True, "/v1")
    assert str(Endpoint.parse("http://h")) == "http://h:80"
    for bad in ("ftp://h/v1", "http:///v1", "gpu-1:8000"):
        with pytest.raises(ValueError, match="http"):
            Endpoint.parse(bad)


def test_events_cut_anywhere_come_out_whole() -> None:
    stream = b'data: {"a": 1}\r\n\r\n: a comment\nevent: x\ndata: [DONE]\n\n'
    pending = bytearray()
    got = []
    for i in range(len(stream)):
        got += server_events(stream[i:i + 1], pending)
    assert got == ['{"a": 1}', "[DONE]"]
    assert pending == b""


async def test_the_gate_bounds_streams_and_waiters() -> None:
    gate = ServerGate("http://h:1/v1", max_streams=1, max_waiting=1, timeout_s=30)
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.slot():
            await release.wait()

    first = asyncio.create_task(hold())
    await asyncio.sleep(0)  # it runs until it waits for the release, holding the slot
    second = asyncio.create_task(hold())
    await asyncio.sleep(0)  # it runs until it waits for the slot
    assert (gate.open, gate.waiting) == (1, 1)
    with pytest.raises(ServerBusy, match="1 streams open and 1 waiting"):
        async with gate.slot():
            pass
    release.set()
    await asyncio.gather(first, second)
    assert (gate.open, gate.waiting) == (0, 0)


async def test_a_waiter_gives_up_after_the_timeout() -> None:
    gate = ServerGate("http://h:1/v1", max_streams=1, max_waiting=4, timeout_s=0.01)
    async with gate.slot():
        with pytest.raises(ServerBusy, match=r"came free within 0\.01 s"):
            async with gate.slot():
                pass
    assert gate.waiting == 0


def test_a_wait_that_fails_is_worded_by_its_cause() -> None:
    where = "http://gpu-1:8000/v1/audio/speech"
    cases = [(True, TimeoutError(), ServerSilent, "did not accept a connection within 2 s"),
             (False, TimeoutError(), ServerSilent, "said nothing for 2 s"),
             (True, ConnectionRefusedError(111, "Connection refused"), ServerDown,
              "is unreachable: Connection refused"),
             (False, ConnectionResetError(), ServerDown, "dropped the connection")]
    for connecting, cause, kind, words in cases:
        with pytest.raises(kind, match=f"^the speech server at {where} {words}"):
            with failures(where, 2, connecting=connecting, server="speech server"):
                raise cause
