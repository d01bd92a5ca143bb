"""I8 end to end: a conversation's bounds and how long an ended session stays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client import RealtimeClient, expect_error, speak, valkey
from gateway_process import GatewayProcess, running_tone

from duplex.store import keys


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("bounded"), "--max-conversation-items", "3",
                      "--ended-session-retention-s", "7") as proc:
        yield proc


def item(n: int) -> dict[str, object]:
    return {"id": f"item_n{n}", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": f"note {n}"}]}


async def test_a_full_conversation_refuses_a_client_item_and_forgets_for_its_own(
        bounded: GatewayProcess) -> None:
    c = await RealtimeClient.connect(bounded.ws)
    try:
        await c.until("session.created")
        for n in range(3):
            await c.send("conversation.item.create", item=item(n))
            await c.until("conversation.item.done")
        await c.send("conversation.item.create", event_id="evt_full", item=item(3))
        refusal = await expect_error(c, "conversation_full")
        assert refusal["error"]["event_id"] == "evt_full"
        assert refusal["error"]["param"] == "item"
        await speak(c, 0.6)  # a VAD turn and its reply: two items, the oldest two go
        await c.until("response.done")
        deleted = [e["item_id"] for e in c.of("conversation.item.deleted")]
        assert deleted == ["item_n0", "item_n1"]
        await c.send("conversation.item.retrieve", item_id="item_n2")
        assert (await c.until("conversation.item.retrieved"))["item"]["id"] == "item_n2"
    finally:
        await c.close()


async def test_an_ended_session_stays_only_as_long_as_configured(
        bounded: GatewayProcess) -> None:
    c = await RealtimeClient.connect(bounded.ws)
    sid = (await c.until("session.created"))["session"]["id"]
    await c.send("session.close")
    await c.until("session.closed")
    await c.close()
    r = valkey(bounded.data_dir)
    try:
        ttl_ms = await r.pttl(keys.meta(sid))
        assert 0 < ttl_ms <= 7000, ttl_ms
    finally:
        await r.aclose()
