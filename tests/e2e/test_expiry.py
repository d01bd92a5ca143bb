"""How sessions end: disconnect grace, idle TTL, close, and resumes racing expiry
(docs/architecture.md §4 "Expiry" and "Close", I5 one terminal, admission slots).

Real gateway processes with short timers (``--disconnect-grace-s 1``,
``--idle-ttl-s 1``, ``--reaper-interval-s 0.2``) and real WebSocket clients.
Where real time must pass, the tests wait for the event or the stored state that
ends the wait, with a bound, and read the journal in the gateway's embedded
Valkey to count terminal events.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from client import (
    TERMINALS,
    RealtimeClient,
    detached,
    eventually,
    expect_error,
    journal,
    last_seq,
    meta,
    resume,
    still_works,
    valkey,
)
from gateway_process import GatewayProcess, running_tone
from websockets.exceptions import ConnectionClosed

GRACE_S = 1.0
REAPER_S = 0.2
REAPER = ("--reaper-interval-s", str(REAPER_S))
LIFETIME_S = 3.0


@pytest.fixture(scope="module")
def short_grace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("short_grace"), *REAPER,
                      "--disconnect-grace-s", str(GRACE_S)) as proc:
        yield proc


@pytest.fixture(scope="module")
def short_idle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("short_idle"), *REAPER,
                      "--idle-ttl-s", "1") as proc:
        yield proc


@pytest.fixture(scope="module")
def short_life(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("short_life"), *REAPER,
                      "--max-session-s", str(LIFETIME_S)) as proc:
        yield proc


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("one_slot"), *REAPER, "--max-sessions", "1",
                      "--disconnect-grace-s", str(GRACE_S)) as proc:
        yield proc


@pytest.fixture
async def store(short_grace: GatewayProcess) -> AsyncIterator[aioredis.Redis]:
    r = valkey(short_grace.data_dir)
    try:
        yield r
    finally:
        await r.aclose()


async def open_session(gw: GatewayProcess, query: str = "") -> tuple[RealtimeClient, str, str]:
    """A new session that has answered one command: (client, session id, resume token)."""
    c = await RealtimeClient.connect(gw.ws + query)
    created = await c.recv()
    assert created["type"] == "session.created"
    await still_works(c)
    await c.until("conversation.item.done")
    return c, created["session"]["id"], created["resume_token"]


async def ended(r: aioredis.Redis, sid: str, state: str, timeout: float = 5.0) -> None:
    async def check() -> bool:
        return (await meta(r, sid)).get("state") == state

    await eventually(check, timeout, f"session {sid} is {state}")


async def the_one_terminal(r: aioredis.Redis, sid: str) -> dict[str, Any]:
    """The journal holds exactly one terminal event, and it is the last event (I5)."""
    events = await journal(r, sid)
    terminals = [e for e in events if e["type"] in TERMINALS]
    assert len(terminals) == 1, terminals
    assert events[-1] is terminals[0]
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # gapless to the end
    return terminals[0]


async def refused_as_expired(gw: GatewayProcess, sid: str, token: str, cursor: int) -> None:
    c = await resume(gw.ws, sid, token, cursor)
    await expect_error(c, "session_resume_expired")
    await asyncio.wait_for(c.ws.wait_closed(), 5)


async def read_to_close(c: RealtimeClient, timeout: float = 5.0) -> None:
    """Read events until the server closes the socket."""
    try:
        while True:
            await c.recv(timeout)
    except ConnectionClosed:
        pass


# -- disconnect grace ------------------------------------------------------------------


async def test_i5_detached_session_expires_after_the_grace_with_one_terminal(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    c, sid, token = await open_session(short_grace)
    cursor = last_seq(c.events)
    dropped = time.monotonic()
    c.ws.transport.abort()
    await ended(store, sid, "expired", timeout=GRACE_S + 10 * REAPER_S + 2)
    waited = time.monotonic() - dropped
    assert waited >= GRACE_S, "expired before the grace ran out"
    await refused_as_expired(short_grace, sid, token, cursor)
    terminal = await the_one_terminal(store, sid)
    assert terminal["type"] == "session.expired"
    assert terminal["reason"] == "disconnect_grace_expired"
    assert terminal["server_event_seq"] == cursor + 1  # nothing else happened meanwhile


async def test_resume_within_the_grace_then_expiry_on_the_next_drop(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    c, sid, token = await open_session(short_grace)
    c.ws.transport.abort()
    await detached(store, sid)
    back = await resume(short_grace.ws, sid, token, last_seq(c.events))
    resumed = await back.recv()
    assert resumed["type"] == "session.resumed"
    assert resumed["replay_count"] == 0
    # attached again: the grace no longer runs, however long it takes
    await still_works(back)
    assert (await meta(store, sid))["detached_at"] == ""
    back.ws.transport.abort()
    await ended(store, sid, "expired", timeout=GRACE_S + 10 * REAPER_S + 2)
    terminal = await the_one_terminal(store, sid)
    assert terminal["reason"] == "disconnect_grace_expired"
    await refused_as_expired(short_grace, sid, resumed["resume_token"], 0)


# -- idle TTL --------------------------------------------------------------------------


async def test_heartbeats_keep_an_idle_session_alive_and_silence_expires_it(
        short_idle: GatewayProcess) -> None:
    c = await RealtimeClient.connect(f"{short_idle.ws}?extensions=duplex")
    created = await c.recv()
    sid = created["session"]["id"]
    loop = asyncio.get_running_loop()
    began = loop.time()
    beats = 0
    while loop.time() - began < 2.5:  # 2.5 × the TTL, one heartbeat each 0.3 s
        due = began + 0.3 * beats
        await asyncio.sleep(max(0.0, due - loop.time()))  # the client's heartbeat cadence
        await c.send("session.heartbeat", event_id=f"evt_beat{beats}")
        await c.until("session.heartbeat_ack", timeout=2)
        beats += 1
    assert not c.of("session.expired"), c.of("session.expired")
    assert len(c.of("session.heartbeat_ack")) == beats
    # silence: the idle TTL runs out and the session ends while attached
    fell_silent = loop.time()
    expired = await c.until("session.expired", timeout=1 + 10 * REAPER_S + 2)
    assert loop.time() - fell_silent >= 0.9  # measured from the last ack, not the beat
    assert expired["reason"] == "idle_ttl_expired"
    assert c.events[-2]["type"] == "error"  # OpenAI's form first, then the extension's
    assert c.events[-2]["error"]["code"] == "session_expired"
    await read_to_close(c)
    assert c.ws.close_code == 1000
    assert len(c.of("session.expired")) == 1 and not c.of("session.closed")
    assert c.events[-1] is expired
    r = valkey(short_idle.data_dir)
    try:
        terminal = await the_one_terminal(r, sid)
        assert terminal["server_event_seq"] == expired["server_event_seq"]
    finally:
        await r.aclose()


# -- admission slots -------------------------------------------------------------------


async def test_expiry_frees_the_admission_slot(one_slot: GatewayProcess) -> None:
    r = valkey(one_slot.data_dir)
    try:
        first, sid, _ = await open_session(one_slot)
        first.ws.transport.abort()
        await detached(r, sid)
        # detached, not ended: the session still holds the only slot
        second = await RealtimeClient.connect(one_slot.ws)
        refusal = await expect_error(second, "resource_exhausted")
        assert refusal["error"]["type"] == "rate_limit_error"
        await asyncio.wait_for(second.ws.wait_closed(), 5)
        assert second.ws.close_code == 1013
        await ended(r, sid, "expired", timeout=GRACE_S + 10 * REAPER_S + 2)
        third = await RealtimeClient.connect(one_slot.ws)  # the slot is free at once
        created = await third.recv()
        assert created["type"] == "session.created", created
        await still_works(third)
        await third.send("session.close")
        await third.until("session.closed")
        await asyncio.wait_for(third.ws.wait_closed(), 5)
    finally:
        await r.aclose()


async def test_the_slot_is_free_when_the_terminal_arrives(one_slot: GatewayProcess) -> None:
    """R9: a client that reopens the moment it hears session.closed is admitted."""
    for _ in range(10):
        c = await RealtimeClient.connect(one_slot.ws)
        assert (await c.recv())["type"] == "session.created"
        await c.send("session.close")
        await c.until("session.closed")
        nxt = await RealtimeClient.connect(one_slot.ws)
        first = await nxt.recv()
        assert first["type"] == "session.created", first
        await nxt.send("session.close")
        await nxt.until("session.closed")
        await asyncio.wait_for(asyncio.gather(c.ws.wait_closed(), nxt.ws.wait_closed()), 5)


# -- close -----------------------------------------------------------------------------


async def test_i5_session_close_gives_one_session_closed_then_1000(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    c, sid, token = await open_session(short_grace)
    await c.send("session.close", reason="bye")
    await read_to_close(c)
    assert c.ws.close_code == 1000
    closed = c.of("session.closed")
    assert len(closed) == 1 and c.events[-1] is closed[0]
    assert closed[0]["reason"] == "bye"
    assert not c.of("session.expired")
    await refused_as_expired(short_grace, sid, token, last_seq(c.events))
    assert (await the_one_terminal(store, sid))["server_event_seq"] == closed[0][
        "server_event_seq"]


async def test_clean_client_close_ends_the_session(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    c, sid, token = await open_session(short_grace)
    await c.ws.close()  # code 1000
    assert c.ws.close_code == 1000
    # at once: whether or not the server has finished closing, a resume is refused
    await refused_as_expired(short_grace, sid, token, last_seq(c.events))
    await ended(store, sid, "closed")
    terminal = await the_one_terminal(store, sid)
    assert (terminal["type"], terminal["reason"]) == ("session.closed", "client_close")


async def test_non_resumable_session_is_closed_by_an_abnormal_drop(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    c, sid, token = await open_session(short_grace, "?resumable=0")
    c.ws.transport.abort()
    await ended(store, sid, "closed")
    m = await meta(store, sid)
    assert m["detached_at"] == ""  # it was never put into grace
    terminal = await the_one_terminal(store, sid)
    assert (terminal["type"], terminal["reason"]) == ("session.closed", "disconnect")
    await refused_as_expired(short_grace, sid, token, last_seq(c.events))


# -- resumes racing expiry ---------------------------------------------------------------

RACERS = 12


async def race_one(gw: GatewayProcess, r: aioredis.Redis, delay: float) -> str:
    """Drop a session, resume it ``delay`` seconds later; return what happened."""
    c, sid, token = await open_session(gw)
    c.ws.transport.abort()
    await detached(r, sid)
    # the moment of the attempt is the experiment, not a synchronisation
    await asyncio.sleep(delay)
    back = await resume(gw.ws, sid, token, last_seq(c.events))
    first = await back.recv()
    if first["type"] == "error":
        assert first["error"]["code"] == "session_resume_expired", first
        await asyncio.wait_for(back.ws.wait_closed(), 5)
        await ended(r, sid, "expired")
        terminal = await the_one_terminal(r, sid)
        assert terminal["reason"] == "disconnect_grace_expired"
        return "expired"
    assert first["type"] == "session.resumed", first
    # Resumed: the session lives on, attached, past the grace it escaped (heartbeats
    # every 0.3 s for twice the grace), and never hears session.expired.
    loop = asyncio.get_running_loop()
    began = loop.time()
    beats = 0
    while loop.time() - began < 2 * GRACE_S + REAPER_S:
        await asyncio.sleep(max(0.0, began + 0.3 * beats - loop.time()))
        await back.send("session.heartbeat")
        await back.until("session.heartbeat_ack", timeout=3)
        beats += 1
    await still_works(back)
    assert not back.of("session.expired") and not back.of("error"), back.events
    assert (await meta(r, sid))["state"] == "open"
    await back.send("session.close")
    await read_to_close(back)
    assert len(back.of("session.closed")) == 1 and not back.of("session.expired")
    terminal = await the_one_terminal(r, sid)
    assert terminal["type"] == "session.closed"
    return "resumed"


async def test_resumes_racing_the_grace_deadline_either_resume_or_expire(
        short_grace: GatewayProcess, store: aioredis.Redis) -> None:
    rng = random.Random(7)
    # spread around the deadline (grace 1 s, then up to one reaper tick): from surely
    # in time to surely late, each with jitter
    delays = [0.6 + 1.0 * i / (RACERS - 1) + rng.uniform(-0.05, 0.05) for i in range(RACERS)]
    outcomes = await asyncio.gather(*(race_one(short_grace, store, d) for d in delays))
    assert set(outcomes) == {"resumed", "expired"}, list(zip(delays, outcomes, strict=True))
    assert outcomes[0] == "resumed" and outcomes[-1] == "expired"


# -- lifetime ------------------------------------------------------------------------------


@pytest.mark.parametrize("extensions", [False, True])
async def test_a_session_ends_at_its_lifetime_in_the_form_its_client_knows(
        short_life: GatewayProcess, extensions: bool) -> None:
    """An attached session is not expired for being quiet (no idle TTL by default);
    its lifetime ends it with OpenAI's ``session_expired`` error and a close. The
    ``session.expired`` extension goes only to a client that opted in."""
    url = f"{short_life.ws}?extensions=duplex" if extensions else short_life.ws
    c = await RealtimeClient.connect(url)
    opened = time.time()
    created = await c.recv()
    sid = created["session"]["id"]
    await still_works(c)
    error = await c.until("error", timeout=LIFETIME_S + 5)
    assert time.time() - opened >= LIFETIME_S - 0.5  # from the open, not from a quiet spell
    assert error["error"]["code"] == "session_expired"
    assert error["error"]["type"] == "invalid_request_error"
    assert "maximum duration" in error["error"]["message"]
    await read_to_close(c)
    assert c.ws.close_code == 1000
    assert c.events[-1]["type"] == ("session.expired" if extensions else "error")
    assert len(c.of("session.expired")) == int(extensions)
    r = valkey(short_life.data_dir)
    try:  # the journal has the terminal either way, for a resume to be told
        terminal = await the_one_terminal(r, sid)
        assert terminal["reason"] == "max_duration"
    finally:
        await r.aclose()
