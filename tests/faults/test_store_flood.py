"""One client cannot fill the store (issue 27): a client that sends the largest
messages each field allows, in a loop, closing each session with 1000 and
opening the next, leaves Valkey's memory bounded by the budgets: a session's
share (``--session-max-store-bytes``) while it lives, the store-wide budget of
ended sessions (``--retained-max-store-bytes``) once it has ended. And a store
that is full all the same (other tenants, a small maxmemory) refuses new work
rather than failing writes mid-turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from client import RealtimeClient, eventually, expect_error, valkey
from gateway_process import running_tone
from redis_server import RedisServer

from duplex import limits
from duplex.store import keys

pytestmark = pytest.mark.timeout(300)

SESSION_BYTES = 1024 * 1024
RETAINED_BYTES = 3 * 1024 * 1024
CYCLES = 14
WARM_UP = 6  # sessions before the retained ones reach their budget
# what Valkey holds beyond the sessions' keys and moves on its own (allocator
# pages, the script cache, client buffers)
SLACK = 2 * 1024 * 1024


async def flood_one_session(url: str) -> set[str]:
    """A session given the largest instructions and items allowed until the store
    refuses them; the codes it was refused with. It must live through them."""
    c = await RealtimeClient.connect(url)
    try:
        assert (await c.recv())["type"] == "session.created"
        biggest = "i" * limits.INSTRUCTIONS.size
        refused: set[str] = set()
        for n in range(2):
            await c.send("session.update", session={"instructions": biggest[:-n or None]})
            assert (await c.recv(30))["type"] == "session.updated"
        text = "t" * limits.TEXT.size
        for _ in range(8):
            await c.send("conversation.item.create", item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]})
            got = await c.recv(30)
            while got["type"] not in ("conversation.item.added", "error"):
                got = await c.recv(30)
            if got["type"] == "error":
                refused.add(got["error"]["code"])
            else:
                await c.until("conversation.item.done", 30)
        await c.send("session.update", session={"voice": "alloy"})  # it lives
        await c.until("session.updated", 30)
        return refused
    finally:
        await c.close()


async def used_memory(data_dir: Path) -> int:
    r = valkey(data_dir)
    try:
        info = await r.info("memory")
        return int(info["used_memory"])
    finally:
        await r.aclose()


async def retained_bytes(data_dir: Path) -> int:
    r = valkey(data_dir)
    try:
        return int(await r.hget(keys.RETAINED_SIZES, "*") or 0)
    finally:
        await r.aclose()


async def test_a_flooding_client_leaves_valkey_memory_bounded(tmp_path: Path) -> None:
    with running_tone(tmp_path, "--session-max-store-bytes", str(SESSION_BYTES),
                      "--retained-max-store-bytes", str(RETAINED_BYTES)) as gw:
        baseline = await used_memory(tmp_path)
        seen: list[int] = []
        codes: set[str] = set()
        for _ in range(CYCLES):
            codes |= await flood_one_session(gw.ws)
            seen.append(await used_memory(tmp_path))
            assert await retained_bytes(tmp_path) <= RETAINED_BYTES
        assert "session_store_full" in codes
        bound = baseline + RETAINED_BYTES + SESSION_BYTES + SLACK
        assert max(seen) <= bound, (baseline, seen)
        warm = max(seen[:WARM_UP])
        assert max(seen[WARM_UP:]) <= warm + SLACK, (warm, seen)


async def first_event_of_a_new_session(url: str) -> dict[str, Any]:
    c = await RealtimeClient.connect(url)
    try:
        return await c.recv()
    finally:
        await c.close()


async def test_a_full_store_refuses_new_sessions_and_turns_then_takes_them_again(
        tmp_path: Path, redis_server: RedisServer) -> None:
    # the store's memory is read each reaper interval (a second at most)
    with running_tone(tmp_path, "--redis-url", redis_server.url,
                      "--reaper-interval-s", "0.2") as gw:
        c = await RealtimeClient.connect(gw.ws)
        assert (await c.recv())["type"] == "session.created"
        r = aioredis.from_url(redis_server.url, decode_responses=True)
        try:
            # another tenant's 20 MB: past 90 % of maxmemory, with a megabyte left
            # for what the sessions write until the gateway has read it
            await r.set("filler", "f" * 20_000_000)
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", int(used / 0.95))

            async def refused() -> dict[str, Any] | None:
                first = await first_event_of_a_new_session(gw.ws)
                return first if first["type"] == "error" else None

            error = (await eventually(refused, 120, "a new session is refused"))["error"]
            assert error["code"] == "store_full" and "full" in error["message"]
            await c.send("response.create")  # a new turn in the session already open
            await expect_error(c, "store_full")
            await r.delete("filler")

            async def opened() -> bool:
                return (await first_event_of_a_new_session(gw.ws))["type"] == "session.created"

            await eventually(opened, 120, "new sessions are taken again")
            await c.send("response.create")
            await c.until("response.done", 30)
        finally:
            await c.close()
            await r.aclose()
