"""Hostile input against one real gateway process, next to a canary session (issue 10).

Hundreds of refused messages (the issue's exact inputs, ``tests/hostile.py``'s
generator, and Hypothesis-drawn ones) go down ONE session. Each must get exactly
one ``error`` event, in order; afterwards the session still answers a heartbeat
and a spoken turn, the canary's events arrived gap-free and its turns completed,
and the process is up and logged no traceback.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from client import RealtimeClient, expect_error, speak, still_works
from gateway_process import GatewayProcess
from hostile import REGRESSIONS, Hostile, strategy
from hypothesis import Phase, given, settings

from duplex.close_codes import MAX_REASON_BYTES

GENERATED = 250
DRAWN = 100


def drawn(count: int) -> list[str | bytes]:
    """``count`` frames drawn by Hypothesis from ``hostile.strategy()`` (reproducibly)."""
    out: list[str | bytes] = []

    @settings(max_examples=count, database=None, derandomize=True, phases=[Phase.generate])
    @given(strategy())
    def collect(frame: str | bytes) -> None:
        out.append(frame)

    collect()
    return out


async def canary(url: str, stop: asyncio.Event) -> list[dict[str, Any]]:
    """A well-behaved session doing voice turns until ``stop``; all its events."""
    c = await RealtimeClient.connect(url)
    try:
        assert (await c.recv())["type"] == "session.created"
        await c.send("session.update", session={"instructions": "words=2", "audio": {
            "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}})
        await c.until("session.updated")
        turns = 0
        while not stop.is_set() or turns == 0:
            await speak(c, 0.3)
            done = await c.until("response.done", 20)
            assert done["response"]["status"] == "completed", done
            turns += 1
        return c.events
    finally:
        await c.close()


async def replies_until_ack(c: RealtimeClient, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Send a heartbeat; every event before its ack."""
    await c.send("session.heartbeat", event_id="evt_alive")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    events = []
    while (event := await c.recv(max(0.01, deadline - loop.time())))["type"] != \
            "session.heartbeat_ack":
        events.append(event)
    return events


def assert_gap_free(events: list[dict[str, Any]]) -> None:
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert seqs == list(range(1, len(seqs) + 1)), seqs


async def test_hostile_session_lives_and_the_canary_sees_nothing(
        gateway: GatewayProcess) -> None:
    frames: list[str | bytes] = [text for text, _ in REGRESSIONS.values()]
    source = Hostile(10)
    frames += [source.message() for _ in range(GENERATED)] + drawn(DRAWN)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        bird = tg.create_task(canary(gateway.ws, stop))
        c = await RealtimeClient.connect(gateway.ws)
        try:
            assert (await c.recv())["type"] == "session.created"
            for frame in frames:
                await c.ws.send(frame)
            replies = await replies_until_ack(c)
            assert [r["type"] for r in replies] == ["error"] * len(frames)
            codes = [r["error"]["code"] for r in replies]
            assert codes[:len(REGRESSIONS)] == [code for _, code in REGRESSIONS.values()]
            assert all(r["error"]["type"] == "invalid_request_error" for r in replies)
            await still_works(c)
            await speak(c, 0.5)
            assert (await c.until("response.done", 20))["response"]["status"] == "completed"
            assert_gap_free(c.events)
        finally:
            stop.set()
            await c.close()
    assert_gap_free(bird.result())
    assert not [e for e in bird.result() if e["type"] == "error"]
    assert gateway.proc is not None and gateway.proc.poll() is None
    assert not [line for line in gateway.output if "Traceback" in line]


async def test_close_reason_over_123_bytes_closes_cleanly(client: RealtimeClient) -> None:
    reason = "€" * 100  # 300 bytes of UTF-8
    await client.send("session.close", reason=reason)
    assert (await client.until("session.closed"))["reason"] == reason
    await asyncio.wait_for(client.ws.wait_closed(), 10)
    assert client.ws.close_code == 1000  # used to be 1006: no close frame at all
    assert client.ws.close_reason == "€" * 40 + "…"
    assert len(client.ws.close_reason.encode()) <= MAX_REASON_BYTES


async def test_each_deep_or_out_of_range_input_alone(client: RealtimeClient) -> None:
    """The regression inputs one at a time, each followed by proof of life."""
    for name in ("deep_arrays", "audio_end_ms_1e400", "surrogate_item_id"):
        text, code = REGRESSIONS[name]
        await client.ws.send(text)
        await expect_error(client, code)
        await still_works(client)


async def test_prefix_padding_ms_zero_is_a_setting_not_a_crash(client: RealtimeClient) -> None:
    await client.send("session.update", session={"audio": {"input": {"turn_detection": {
        "type": "server_vad", "prefix_padding_ms": 0, "silence_duration_ms": 200}}}})
    await client.until("session.updated")
    await speak(client, 0.5)
    done = await client.until("response.done", 20)
    assert done["response"]["status"] == "completed"
    assert not client.of("error"), json.dumps(client.of("error"))
