"""Detach, resume and takeover over real sockets (docs/architecture.md §4 "Detach, resume", I4).

Every test drives real ``duplex-gateway serve`` processes with real WebSocket
clients. A socket dropped without a close frame (``transport.abort()``) detaches
its session; ``?resume=<sid>`` + ``session.resume`` re-attaches it and replays
the journal after the client's cursor. Where a check needs state that has no
event of its own (the journal while no socket is attached, the lease), it reads
the gateway's embedded Valkey.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from client import (
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
from disconnects import Churn, assert_counts_up, seqs_of, spoken_words
from gateway_process import GatewayProcess, running_tone
from websockets.exceptions import ConnectionClosed


@pytest.fixture(scope="module")
def streamer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Reply audio may run 40 s ahead of real time: of a 404-word reply (80.8 s,
    ~810 events) the first ~400 events are journaled at once, the rest stream live
    at ~10 events/s, so the cycles drain a backlog first and then race live output."""
    with running_tone(tmp_path_factory.mktemp("streamer"), "--output-lead-ms", "40000") as proc:
        yield proc


@pytest.fixture(scope="module")
def small_journal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("small_journal"),
                      "--resume-replay-max-bytes", "20000") as proc:
        yield proc


@pytest.fixture
async def opened(gateway: GatewayProcess) -> AsyncIterator[tuple[RealtimeClient, dict[str, Any]]]:
    """A new session on the shared gateway: its client and its session.created."""
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.recv()
    assert created["type"] == "session.created"
    try:
        yield c, created
    finally:
        await c.ws.close()


async def resumed_on(url: str, sid: str, token: str, cursor: int) -> tuple[RealtimeClient,
                                                                          dict[str, Any]]:
    """Resume; the first event must be ``session.resumed``."""
    c = await resume(url, sid, token, cursor)
    first = await c.recv()
    assert first["type"] == "session.resumed", first
    return c, first


async def refused(c: RealtimeClient, code: str) -> dict[str, Any]:
    """A refused resume: one error with ``code``, then the server closes (1008)."""
    error = await expect_error(c, code)
    await asyncio.wait_for(c.ws.wait_closed(), 5)
    assert c.ws.close_code == 1008
    return error


async def probe(c: RealtimeClient) -> dict[str, Any]:
    """``still_works``, read through the probe item's last event (``conversation.item.done``),
    so the client has seen everything the session journaled."""
    await still_works(c)
    return await c.until("conversation.item.done")


# -- 50 random disconnects ----------------------------------------------------------

SEED = int(os.environ.get("DG_RESUME_SEED") or "20250607")  # override to explore
CYCLES = 50


async def test_i4_fifty_random_disconnects_lose_and_duplicate_nothing(
        streamer: GatewayProcess) -> None:
    churn = await Churn.start(streamer.ws)
    await churn.cycles(CYCLES, random.Random(SEED), lambda: streamer.ws)
    await churn.finish_and_check()
    assert len(churn.sockets) == CYCLES + 1
    # The last attachment is the live one: no stale detach put it into grace (R15).
    r = valkey(streamer.data_dir)
    try:
        m = await meta(r, churn.sid)
    finally:
        await r.aclose()
    assert (m["state"], int(m["generation"]), m["detached_at"]) == (
        "open", churn.generation, "")
    await churn.client.send("session.close")
    await churn.client.until("session.closed")


# -- session.resumed and replay --------------------------------------------------------


async def test_resumed_rotates_token_bumps_generation_and_replays_after_the_cursor(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    first, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(first)
    await probe(first)
    seen = first.events
    top = last_seq(seen)
    cursor = top - 3
    first.ws.transport.abort()

    second, resumed = await resumed_on(gateway.ws, sid, token, cursor)
    assert resumed["attachment_generation"] == 2
    assert resumed["resume_token"] not in (token, None)
    assert resumed["session"]["id"] == sid
    assert resumed["last_server_event_seq"] == top
    assert resumed["replay_count"] == 3
    assert "server_event_seq" not in resumed
    replay = [await second.recv() for _ in range(3)]
    # exactly the journaled events after the cursor, byte for byte as first sent
    assert replay == [e for e in seen if e.get("server_event_seq", 0) > cursor]
    done = await probe(second)  # then live events go on from the top
    assert seqs_of(second.events) == list(range(cursor + 1, done["server_event_seq"] + 1))

    # The old token is spent; a refused resume leaves the live socket alone. (A wrong
    # token gets the answer an unknown session gets: gateway.auth.resume_refused.)
    stale = await resume(gateway.ws, sid, token, top)
    await refused(stale, "session_resume_expired")
    await probe(second)

    # The next resume rotates again, from the token session.resumed carried.
    second.ws.transport.abort()
    third, again = await resumed_on(gateway.ws, sid, resumed["resume_token"],
                                    last_seq(second.events))
    assert again["attachment_generation"] == 3
    assert again["replay_count"] == 0
    assert again["resume_token"] not in (token, resumed["resume_token"])
    await probe(third)
    older = await resume(gateway.ws, sid, resumed["resume_token"], 0)
    await refused(older, "session_resume_expired")
    await third.close()


async def test_unknown_session_is_resume_expired(gateway: GatewayProcess) -> None:
    c = await resume(gateway.ws, "sess_neverexisted000000000000", "x" * 43, 0)
    await refused(c, "session_resume_expired")


async def test_resume_naming_another_session_is_invalid(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    c = await resume(gateway.ws, sid, token, 1, session_id="sess_someotherone0000000000")
    await refused(c, "invalid_session_resume")
    await probe(live)  # nothing happened to the session
    live.ws.transport.abort()
    back, resumed = await resumed_on(gateway.ws, sid, token, last_seq(live.events))
    assert resumed["attachment_generation"] == 2  # the token was not spent
    await back.close()


@pytest.mark.parametrize("first", [
    {"type": "session.heartbeat"},
    {"type": "input_audio_buffer.clear"},
])
async def test_first_message_other_than_session_resume_is_invalid(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]],
        first: dict[str, Any]) -> None:
    live, created = opened
    c = await RealtimeClient.connect(f"{gateway.ws}?resume={created['session']['id']}")
    await c.send(first["type"])
    await refused(c, "invalid_session_resume")
    await probe(live)


async def test_cursor_ahead_of_the_journal_is_refused(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    live, created = opened
    await probe(live)
    top = last_seq(live.events)
    live.ws.transport.abort()
    c = await resume(gateway.ws, created["session"]["id"], created["resume_token"], top + 5)
    error = await refused(c, "invalid_session_resume")
    assert "ahead" in error["error"]["message"]


async def test_a_refused_cursor_leaves_the_session_as_it_was(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(live)
    top = last_seq(live.events)
    c = await resume(gateway.ws, sid, token, top + 5)
    await refused(c, "invalid_session_resume")
    assert not live.of("session.replaced")
    await probe(live)  # today: session.replaced, then closed with 4000
    live.ws.transport.abort()
    back, resumed = await resumed_on(gateway.ws, sid, token, last_seq(live.events))
    assert resumed["attachment_generation"] == 2
    await back.close()


async def test_a_refused_cursor_leaves_a_detached_session_in_its_grace(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(live)
    top = last_seq(live.events)
    live.ws.transport.abort()
    r = valkey(gateway.data_dir)
    try:
        before = await detached(r, sid)
        c = await resume(gateway.ws, sid, token, top + 5)
        await refused(c, "invalid_session_resume")
        after = await meta(r, sid)
    finally:
        await r.aclose()
    assert (after["generation"], after["detached_at"]) == (
        before["generation"], before["detached_at"])


async def test_a_resume_lost_in_the_handshake_can_be_retried(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(live)
    cursor = last_seq(live.events)
    live.ws.transport.abort()
    r = valkey(gateway.data_dir)
    try:
        lost = await resume(gateway.ws, sid, token, cursor)

        async def rotated() -> bool:
            return int((await meta(r, sid))["generation"]) == 2

        await eventually(rotated, 5, "the server took the resume")
        lost.ws.transport.abort()  # session.resumed was never read

        await detached(r, sid)  # the server saw the handshake socket go
    finally:
        await r.aclose()
    back, resumed = await resumed_on(gateway.ws, sid, token, cursor)
    assert resumed["attachment_generation"] == 3
    await probe(back)
    await back.close()


async def test_the_spent_token_replaces_a_resumed_socket_that_has_not_spoken(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    """A half-open handshake socket looks alive to the server, so until the new socket
    speaks the spent token may retry the resume, and the retry replaces it."""
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(live)
    cursor = last_seq(live.events)
    silent, _ = await resumed_on(gateway.ws, sid, token, cursor)
    retry, resumed = await resumed_on(gateway.ws, sid, token, cursor)
    assert resumed["attachment_generation"] == 3
    replaced = await silent.until("session.replaced")
    assert replaced["attachment_generation"] == 3
    await asyncio.wait_for(silent.ws.wait_closed(), 5)
    assert silent.ws.close_code == 4000
    await probe(retry)  # now the new socket has spoken: the old token is spent for good
    stale = await resume(gateway.ws, sid, token, cursor)
    await refused(stale, "session_resume_expired")
    await probe(retry)
    await retry.close()


# -- takeover ------------------------------------------------------------------------


async def test_takeover_replaces_the_old_socket_whose_input_is_then_ignored(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    old, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(old)
    new, resumed = await resumed_on(gateway.ws, sid, token, last_seq(old.events))
    assert resumed["attachment_generation"] == 2

    replaced = await old.until("session.replaced")
    assert replaced["attachment_generation"] == 2
    try:  # whatever the replaced socket still manages to send must have no effect
        await old.send("conversation.item.create", event_id="evt_ghost", item={
            "id": "item_ghost", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "from the replaced socket"}]})
    except ConnectionClosed:
        pass
    try:
        while True:
            await old.recv(5)
    except ConnectionClosed:
        pass
    assert old.ws.close_code == 4000
    assert old.events[-1] is replaced  # nothing after session.replaced

    await probe(new)
    await new.send("conversation.item.retrieve", event_id="evt_where", item_id="item_ghost")
    missing = await expect_error(new, "item_retrieve_invalid_item_id")
    assert missing["error"]["event_id"] == "evt_where"
    assert not [e for e in new.events if e.get("item", {}).get("id") == "item_ghost"]
    r = valkey(gateway.data_dir)
    try:
        assert not [e for e in await journal(r, sid)
                    if e.get("item", {}).get("id") == "item_ghost"]
        m = await meta(r, sid)  # the replaced socket's end did not detach the new one
        assert (m["generation"], m["detached_at"]) == ("2", "")
    finally:
        await r.aclose()
    await new.close()


async def test_racing_takeovers_with_one_token_have_exactly_one_winner(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    """Two resumes with one token: either one is refused, or, when the second lands
    before the first socket speaks, the spent token still counts as its recovery token
    (R16/R17) and the second replaces the first. Either way one socket is left."""
    live, created = opened
    sid, token = created["session"]["id"], created["resume_token"]
    await probe(live)
    cursor = last_seq(live.events)
    generation = 1
    for _ in range(5):
        pair = await asyncio.gather(resume(gateway.ws, sid, token, cursor),
                                    resume(gateway.ws, sid, token, cursor))
        firsts = await asyncio.gather(*(c.recv() for c in pair))
        won = [c for c, f in zip(pair, firsts, strict=True) if f["type"] == "session.resumed"]
        lost = [c for c, f in zip(pair, firsts, strict=True) if f["type"] != "session.resumed"]
        assert won, firsts
        if lost:
            (winner,), (loser,) = won, lost
            assert loser.events[0]["type"] == "error", firsts
            code = loser.events[0]["error"]["code"]
            assert code in ("session_resume_conflict", "session_resume_expired"), firsts
            generation += 1
        else:
            first, winner = sorted(won, key=lambda c: c.events[0]["attachment_generation"])
            assert [c.events[0]["attachment_generation"] for c in (first, winner)] == [
                generation + 1, generation + 2]
            replaced = await first.until("session.replaced")
            assert replaced["attachment_generation"] == generation + 2
            loser = first
            generation += 2
        await asyncio.wait_for(loser.ws.wait_closed(), 5)
        assert winner.events[0]["attachment_generation"] == generation
        await probe(winner)
        token, cursor = winner.events[0]["resume_token"], last_seq(winner.events)
        winner.ws.transport.abort()
    await asyncio.wait_for(live.ws.wait_closed(), 5)
    assert live.ws.close_code == 4000


async def test_event_ack_trims_the_journal(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    c, created = opened
    sid = created["session"]["id"]
    for _ in range(3):
        await probe(c)
    acked = last_seq(c.events) - 2
    await c.send("session.event_ack", server_event_seq=acked)
    await c.send("session.heartbeat")  # the control lane is FIFO: the ack ran first
    await c.until("session.heartbeat_ack")
    r = valkey(gateway.data_dir)
    try:
        assert (await journal(r, sid))[0]["server_event_seq"] == acked + 1
    finally:
        await r.aclose()
    c.ws.transport.abort()

    at_ack, resumed = await resumed_on(gateway.ws, sid, created["resume_token"], acked)
    assert resumed["replay_count"] == last_seq(c.events) - acked
    for _ in range(resumed["replay_count"]):
        await at_ack.recv()
    assert seqs_of(at_ack.events) == list(range(acked + 1, last_seq(c.events) + 1))
    at_ack.ws.transport.abort()

    below = await resume(gateway.ws, sid, resumed["resume_token"], acked - 1)
    gap = await below.recv()
    assert gap["type"] == "session.resync_required", gap
    assert gap["reason"] == "journal_gap"
    assert gap["oldest_server_event_seq"] == acked + 1
    assert not below.of("session.resumed")
    await asyncio.wait_for(below.ws.wait_closed(), 5)


async def test_bounded_journal_gives_resync_required_after_a_long_reply(
        small_journal: GatewayProcess) -> None:
    c = await RealtimeClient.connect(small_journal.ws)
    created = await c.recv()
    sid = created["session"]["id"]
    await c.send("session.update", session={"instructions": "words=12"})
    await c.send("response.create")
    await c.until("response.done", timeout=20)
    await c.until("rate_limits.updated")
    top = last_seq(c.events)
    c.ws.transport.abort()
    # the end of the journal is still there …
    at_top, resumed = await resumed_on(small_journal.ws, sid, created["resume_token"], top)
    assert resumed["replay_count"] == 0
    await probe(at_top)
    at_top.ws.transport.abort()
    # … its beginning is not: ~13 KB per audio delta against a 20000-byte bound
    start = await resume(small_journal.ws, sid, resumed["resume_token"], 0)
    gap = await start.recv()
    assert gap["type"] == "session.resync_required", gap
    assert gap["reason"] == "journal_gap"
    assert gap["oldest_server_event_seq"] > 1
    await asyncio.wait_for(start.ws.wait_closed(), 5)


# -- a detached session keeps generating ------------------------------------------------


async def test_events_made_while_detached_are_replayed_and_the_reply_completes(
        gateway: GatewayProcess, opened: tuple[RealtimeClient, dict[str, Any]]) -> None:
    c, created = opened
    sid = created["session"]["id"]
    await c.send("session.update", session={"instructions": "words=12"})
    await c.send("response.create")
    first = await c.until("response.output_audio.delta")
    rid = first["response_id"]
    cursor = last_seq(c.events)
    c.ws.transport.abort()
    r = valkey(gateway.data_dir)
    try:
        async def finished_alone() -> bool:
            # the reply is paced at real time (16 words ≈ 3.2 s): it ends while detached
            events = await journal(r, sid)
            return any(e["type"] == "response.done" for e in events)

        await eventually(finished_alone, 15, "the reply finished while detached")
        m = await meta(r, sid)
        assert (m["generation"], m["state"]) == ("1", "open")
        assert m["detached_at"] != ""  # nobody was attached meanwhile
    finally:
        await r.aclose()

    back, resumed = await resumed_on(gateway.ws, sid, created["resume_token"], cursor)
    replayed = [await back.recv() for _ in range(resumed["replay_count"])]
    assert seqs_of(replayed) == list(range(cursor + 1, resumed["last_server_event_seq"] + 1))
    done = [e for e in replayed if e["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["id"] == rid
    assert done[0]["response"]["status"] == "completed"
    words = spoken_words([*c.events, *replayed], rid)
    assert len(words) == 16
    assert_counts_up(words)
    assert " ".join(words) + " " == done[0]["response"]["output"][0]["content"][0]["transcript"]
    await probe(back)
    await back.close()
