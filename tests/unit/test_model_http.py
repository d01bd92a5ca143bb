"""The pieces of ``engines.model_http`` that need no server: where an API
lives, server-sent events cut anywhere, and the gate's bounds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

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


def _eventually(done: Callable[[], bool]) -> None:
    """Wait for another thread to get where ``done`` says (it signals nothing)."""
    tick = threading.Event()
    for _ in range(10000):
        if done():
            return
        tick.wait(0.001)
    raise AssertionError("the other thread never got there")


def test_the_gate_bounds_threads_and_words_the_bounds_by_their_flags() -> None:
    gate = ServerGate("http://h:1/v1", max_streams=1, max_waiting=1, timeout_s=30,
                      flags="tts", server="speech server")
    holding, release = threading.Event(), threading.Event()
    served: list[str] = []

    def hold(name: str) -> None:
        with gate.held():
            served.append(name)
            holding.set()
            release.wait()

    first = threading.Thread(target=hold, args=("first",))
    first.start()
    holding.wait()
    second = threading.Thread(target=hold, args=("second",))
    second.start()
    _eventually(lambda: gate.waiting == 1)
    assert gate.open == 1
    with pytest.raises(ServerBusy, match=r"^the speech server at http://h:1/v1 is busy: 1 "
                                         r"streams open and 1 waiting \(--tts-max-streams 1, "
                                         r"--tts-max-waiting 1\)$"):
        with gate.held():
            pass
    release.set()
    first.join()
    second.join()
    assert served == ["first", "second"] and (gate.open, gate.waiting) == (0, 0)


def test_a_thread_waiting_for_a_slot_gives_up_after_the_timeout() -> None:
    gate = ServerGate("http://h:1/v1", max_streams=1, max_waiting=1, timeout_s=0.01,
                      flags="asr", server="speech server")
    with gate.held():
        with pytest.raises(ServerBusy, match=r"^no stream to the speech server at "
                                             r"http://h:1/v1 came free within 0\.01 s \(1 open\)"):
            with gate.held():
                pass
        assert (gate.open, gate.waiting) == (1, 0)
    with gate.held():  # the slot came back
        assert gate.open == 1
