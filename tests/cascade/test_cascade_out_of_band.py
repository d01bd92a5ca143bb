"""Out-of-band replies on the default voice agent (a real gateway on the cascade
plugin, Qwen2.5-Coder-1.5B on llama.cpp): ``response.create`` with ``input``
and ``conversation: "none"`` answers from exactly those items, and the main
conversation goes on as if it had not happened. Typed turns, text replies
(the speech path is the same as any reply's); checked by meaning, not words."""

from __future__ import annotations

from typing import Any

import pytest
from client import RealtimeClient
from gateway_process import GatewayProcess

pytest.importorskip("xllamacpp", reason="the [cpu] extra (xllamacpp) is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REPLY_S = 240  # a busy 2-core box: a reply's prefill alone may take a while
TEXT = ["text"]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def said(response: dict[str, Any]) -> str:
    return " ".join(part.get("text") or part.get("transcript") or ""
                    for item in response["output"] if item["type"] == "message"
                    for part in item["content"]).lower()


async def reply(c: RealtimeClient, **options: Any) -> dict[str, Any]:
    await c.send("response.create", response={"output_modalities": TEXT, **options})
    done = (await c.until("response.done", timeout=REPLY_S))["response"]
    assert done["status"] == "completed", done
    return done


async def tell(c: RealtimeClient, text: str) -> str:
    """A user message in the conversation; its item id."""
    await c.send("conversation.item.create", item=user(text))
    return str((await c.until("conversation.item.added"))["item"]["id"])


async def test_out_of_band_replies_answer_from_their_input_alone(agent: GatewayProcess) -> None:
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        name_id = await tell(c, "My name is Ada.")
        await tell(c, "My favourite fruit is the mango.")
        main = await reply(c)
        banana = await reply(c, conversation="none", input=[user("Say the word banana.")],
                             metadata={"purpose": "probe"})
        assert "banana" in said(banana), said(banana)
        assert banana["metadata"] == {"purpose": "probe"}
        assert banana["conversation_id"] is None
        # a reference brings one item of the conversation, and only it
        named = await reply(c, conversation="none", input=[
            {"type": "item_reference", "id": name_id},
            user("What is my name? Answer with the name only.")])
        assert "ada" in said(named), said(named)
        # the conversation never saw either: not as items, not in the model's context
        added = {e["item"]["id"] for e in c.of("conversation.item.added")}
        assert not {o["id"] for r in (banana, named) for o in r["output"]} & added
        await tell(c, "Which fruit did I say is my favourite? Answer with one word.")
        after = await reply(c)
        assert "mango" in said(after), said(after)
        assert "banana" not in said(after) + said(main)
        assert [e for e in c.events if e["type"] == "error"] == []
    finally:
        await c.close()


async def test_a_bad_reference_is_refused_and_a_cancel_stops_the_reply(
        agent: GatewayProcess) -> None:
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("response.create", response={"conversation": "none", "input": [
            {"type": "item_reference", "id": "item_nope"}]})
        error = await c.until("error")
        assert error["error"]["param"] == "response.input[0].id", error
        await c.send("response.create", response={
            "conversation": "none", "output_modalities": TEXT,
            "input": [user("Tell me a long story about a dragon.")]})
        created = (await c.until("response.created"))["response"]
        await c.send("response.cancel")
        done = (await c.until("response.done", timeout=REPLY_S))["response"]
        assert done["id"] == created["id"] and done["status"] == "cancelled", done
        # the session goes on: its conversation is answered as usual
        await tell(c, "Say the word yes.")
        after = await reply(c)
        assert "yes" in said(after), said(after)
    finally:
        await c.close()
