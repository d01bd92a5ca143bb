"""``response.create`` with its own ``input`` (inline items and
``item_reference``s) and ``conversation: "none"``: the reply is built from
exactly those items and stays out of the conversation."""

from __future__ import annotations

from typing import Any

from client import RealtimeClient, expect_error


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def reply_to(c: RealtimeClient, **response: Any) -> dict[str, Any]:
    await c.send("response.create", response=response)
    done = await c.until("response.done")
    return dict(done["response"])


def words(response: dict[str, Any]) -> str:
    return str(response["output"][0]["content"][0]["transcript"])


async def test_a_reply_from_its_own_input_leaves_the_conversation_alone(
        client: RealtimeClient) -> None:
    await client.send("conversation.item.create", item=user("the conversation's words"))
    kept = (await client.until("conversation.item.done"))["item"]
    response = await reply_to(client, conversation="none", metadata={"purpose": "summary"},
                              input=[user("out of band words")])
    assert words(response).startswith("about out of band words")
    assert response["conversation_id"] is None and response["metadata"] == {
        "purpose": "summary"}
    # from a reference to a conversation item: its words, not the newest item's
    await client.send("conversation.item.create", item=user("a later item"))
    await client.until("conversation.item.done")
    response = await reply_to(client, conversation="none",
                              input=[{"type": "item_reference", "id": kept["id"]}])
    assert words(response).startswith("about the conversation's words")
    # out of band: neither reply joined the conversation
    added = [e["item"]["id"] for e in client.of("conversation.item.added")]
    assert all(o["id"] not in added for e in client.of("response.done")
               for o in e["response"]["output"])


async def test_bad_input_names_the_item(client: RealtimeClient) -> None:
    await client.send("response.create", response={"input": [
        user("fine"), {"type": "item_reference", "id": "item_nope"}]})
    error = await expect_error(client, "invalid_value")
    assert error["error"]["param"] == "response.input[1].id"
    await client.send("response.create", response={"input": [{"type": "message",
                                                               "role": "robot"}]})
    error = await expect_error(client, "invalid_value")
    assert error["error"]["param"] == "response.input[0].role"
    await client.send("response.create", response={"input": "words"})
    error = await expect_error(client, "invalid_type")
    assert error["error"]["param"] == "response.input"
    # a refused create started nothing: the next one is answered
    response = await reply_to(client, input=[user("after the errors")])
    assert words(response).startswith("about after the errors")
