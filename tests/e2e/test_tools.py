"""Function calling over a real gateway (the tone plugin calls by rule:
``plugins.tone.calls``): tools on the session and per response, the call's
events in OpenAI's order, the client's output answered, calls created and
restored like messages, and a resume in the middle of a call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from client import RealtimeClient, expect_error, last_seq, resume, speak
from gateway_process import GatewayProcess

WEATHER = {
    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]},
}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object",
                                                                "properties": {}}}
CALL_EVENTS = ["response.output_item.added", "conversation.item.added",
               "response.function_call_arguments.delta",
               "response.function_call_arguments.done", "response.output_item.done",
               "conversation.item.done"]


async def updated(c: RealtimeClient, **session: Any) -> dict[str, Any]:
    await c.send("session.update", session=session)
    event = await c.until("session.updated")
    return dict(event["session"])


async def one_response(c: RealtimeClient) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The events of the next response, from response.created to response.done."""
    start = len(c.events)
    await c.until("response.created")
    created = len(c.events) - 1
    done = await c.until("response.done", 20)
    assert created >= start
    return c.events[created:], done["response"]


async def test_session_tools_are_kept_shown_and_checked(client: RealtimeClient) -> None:
    session = await updated(client, tools=[WEATHER, TIME], tool_choice="required")
    assert [t["name"] for t in session["tools"]] == ["get_weather", "get_time"]
    assert session["tools"][0]["parameters"] == WEATHER["parameters"]
    assert session["tool_choice"] == "required"
    # all or nothing: a bad tool names its field and changes nothing
    await client.send("session.update", session={
        "instructions": "x", "tools": [WEATHER, {"type": "mcp", "server_label": "s"}]})
    error = await expect_error(client, "invalid_value")
    assert error["error"]["param"] == "session.tools[1].type"
    await client.send("session.update", session={"tool_choice": {"type": "function",
                                                                 "name": "nope"}})
    error = await expect_error(client, "invalid_value")
    assert error["error"]["param"] == "session.tool_choice.name"
    session = await updated(client, tool_choice={"type": "function", "name": "get_time"})
    assert session["tool_choice"] == {"type": "function", "name": "get_time"}
    assert session["instructions"] == ""  # the refused update left nothing behind


async def test_a_spoken_turn_calls_the_tool_and_its_output_is_answered(
        client: RealtimeClient) -> None:
    await updated(client, tools=[WEATHER], instructions="call=get_weather")
    await speak(client)
    events, response = await one_response(client)
    kinds = [e["type"] for e in events]
    call_kinds = [k for k in kinds if k in CALL_EVENTS]
    assert call_kinds == CALL_EVENTS, kinds
    assert "response.output_audio.delta" not in kinds  # a call, no words
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["status"] == "in_progress"
    assert added["output_index"] == 0
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    call_id = done["call_id"]
    assert done["name"] == "get_weather"
    arguments = json.loads(done["arguments"])
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    deltas = "".join(e["delta"] for e in events
                     if e["type"] == "response.function_call_arguments.delta")
    assert deltas == done["arguments"]
    assert response["status"] == "completed"
    assert [(o["type"], o["call_id"], o["status"]) for o in response["output"]] == [
        ("function_call", call_id, "completed")]

    await client.send("conversation.item.create", item={
        "type": "function_call_output", "call_id": call_id, "output": "seventeen degrees"})
    await client.until("conversation.item.done")
    await client.send("response.create")
    events, response = await one_response(client)
    assert [o["type"] for o in response["output"]] == ["message"]
    transcript = response["output"][0]["content"][0]["transcript"]
    assert "seventeen degrees" in transcript  # the reply uses the tool's result
    assert any(e["type"] == "response.output_audio.delta" for e in events)

    await client.send("conversation.item.retrieve", item_id=done["item_id"])
    item = (await client.until("conversation.item.retrieved"))["item"]
    assert (item["type"], item["call_id"], item["arguments"]) == (
        "function_call", call_id, done["arguments"])


async def test_parallel_tool_calls_says_how_many_calls_a_response_makes(
        client: RealtimeClient) -> None:
    """The tone plugin makes a call per ``call=``; ``parallel_tool_calls: false``
    keeps the first alone."""
    session = await updated(client, tools=[WEATHER, TIME],
                            instructions="call=get_weather call=get_time")
    assert session["parallel_tool_calls"] is True  # OpenAI's default
    await client.send("response.create")
    events, response = await one_response(client)
    assert [(o["type"], o["name"]) for o in response["output"]] == [
        ("function_call", "get_weather"), ("function_call", "get_time")]
    for index, item in enumerate(response["output"]):  # each streamed at its own index
        mine = [e["type"] for e in events if e.get("item_id", e.get("item", {}).get("id"))
                == item["id"]]
        assert [k for k in mine if k in CALL_EVENTS and not k.endswith(".delta")] == [
            k for k in CALL_EVENTS if not k.endswith(".delta")], mine
        added = next(e for e in events if e["type"] == "response.output_item.added"
                     and e["item"]["id"] == item["id"])
        assert added["output_index"] == index
    assert (await updated(client, parallel_tool_calls=False))["parallel_tool_calls"] is False
    await client.send("response.create")
    _, response = await one_response(client)
    assert [o["name"] for o in response["output"]] == ["get_weather"]
    await client.send("response.create", response={"parallel_tool_calls": True})
    _, response = await one_response(client)
    assert [o["name"] for o in response["output"]] == ["get_weather", "get_time"]


async def test_per_response_tools_and_choices(client: RealtimeClient) -> None:
    """The session has no tools; a response brings its own, ``none`` forbids calls."""
    await client.send("response.create", response={"tools": [TIME], "tool_choice": "required"})
    _, response = await one_response(client)
    assert [(o["type"], o["name"]) for o in response["output"]] == [("function_call",
                                                                       "get_time")]
    await updated(client, tools=[TIME], tool_choice="required")
    await client.send("response.create", response={"tool_choice": "none"})
    _, response = await one_response(client)
    assert [o["type"] for o in response["output"]] == ["message"]
    await client.send("response.create", response={"tool_choice": {"type": "function",
                                                                   "name": "missing"}})
    error = await expect_error(client, "invalid_value")
    assert error["error"]["param"] == "response.tool_choice.name"


async def test_a_history_with_calls_is_restored_and_used(client: RealtimeClient) -> None:
    """As LiveKit replays its chat context on reconnect: calls and outputs as items."""
    items = [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "weather in Oslo?"}]},
        {"type": "function_call", "call_id": "call_old", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_old", "output": "minus four"},
    ]
    for i, item in enumerate(items):  # the first "after root", as LiveKit sends it
        await client.send("conversation.item.create", item=item,
                          previous_item_id="root" if i == 0 else None)
        done = await client.until("conversation.item.done")
        assert done["item"]["type"] == item["type"]
    await client.send("response.create")
    _, response = await one_response(client)
    assert "minus four" in response["output"][0]["content"][0]["transcript"]
    await client.send("conversation.item.create", item={"type": "function_call",
                                                         "name": "get_weather"})
    error = await expect_error(client, "missing_required_parameter")
    assert error["error"]["param"] == "item.call_id"


@pytest.mark.parametrize("drop_after", ["response.function_call_arguments.delta",
                                        "response.output_item.added"])
async def test_a_client_dropped_mid_call_resumes_exactly(gateway: GatewayProcess,
                                                         drop_after: str) -> None:
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.recv()
    sid, token = created["session"]["id"], created["resume_token"]
    await c.send("response.create", response={"tools": [WEATHER], "tool_choice": "required"})
    await c.until(drop_after)
    cursor = last_seq(c.events)
    assert c.ws.transport is not None
    c.ws.transport.abort()  # no close frame: the session detaches, its journal goes on

    r = await resume(gateway.ws, sid, token, cursor)
    assert (await r.recv())["type"] == "session.resumed"
    await r.until("response.done")
    seen = c.events + r.events
    numbered = [e["server_event_seq"] for e in seen if "server_event_seq" in e]
    assert numbered == list(range(1, len(numbered) + 1))  # nothing lost, nothing twice
    kinds = [e["type"] for e in seen]
    assert [k for k in kinds if k in CALL_EVENTS] == CALL_EVENTS
    done = next(e for e in seen if e["type"] == "response.function_call_arguments.done")
    assert json.loads(done["arguments"])["unit"] == "celsius"
    await r.close()
