"""``@openai/agents-realtime`` with its defaults: a ``RealtimeAgent`` in a
``RealtimeSession`` on the WebSocket transport, told only the gateway's ``url``.

What its users rely on: the agent's instructions hold through the SDK's own default
``session.update`` (``semantic_vad``, ``tracing: auto``…); a spoken turn plays audio
and lands in ``history_updated`` with the user's transcript and the agent's; talking
over the agent interrupts it and the SDK's truncate leaves the history at what was
heard; a text message gets a reply; a bad request reaches the SDK's ``error`` event.
And an agent's ``tool()``: the SDK declares it, runs its ``execute`` when the model
calls it, sends the output back and the reply that follows says it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tier import Drivers, rejected_events, said_turn, turn_of


@pytest.fixture(scope="module")
def report(drivers: Drivers) -> dict[str, Any]:
    return drivers.node("agents_realtime.mjs")


def messages(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(role, status, what it says) for each item of the SDK's last history."""
    return [(i["role"], i["status"], i["content"][0]["transcript"] or i["content"][0]["text"])
            for i in report["history"]]


def test_the_agents_instructions_hold_with_the_sdks_defaults(report: dict[str, Any]) -> None:
    assert report["session"]["instructions"] == "You are a helpful assistant. words=5"
    assert report["session"]["turn_detection"]["type"] == "semantic_vad"
    said = messages(report)[1][2]
    assert len(said.split()) == 4 + 5  # "answer to turn 1:" and five words


def test_a_spoken_turn_is_audio_and_history(report: dict[str, Any]) -> None:
    spoken = report["spoken"]
    assert spoken["status"] == "completed" and spoken["audio_ms"] == 9 * 200
    assert turn_of(spoken) == 1
    assert messages(report)[:2] == [
        ("user", "completed", "tone turn 1, 1000 ms of speech"),
        ("assistant", "completed", "answer to turn 1: one two three four five ")]


def test_a_barge_in_truncates_the_history_to_what_was_heard(report: dict[str, Any]) -> None:
    cut = report["barge_in"]
    assert (cut["status"], cut["reason"]) == ("cancelled", "turn_detected")
    assert report["interruptions"] >= 1  # the SDK told its player to stop
    assert 600 <= cut["truncated"]["audio_end_ms"] < cut["audio_ms"]
    role, status, heard = messages(report)[3]
    assert (role, status) == ("assistant", "incomplete")
    assert heard.split()[:2] == ["answer", "to"] and len(heard.split()) < 4 + 5
    assert turn_of(cut) == 2
    after = report["after_barge_in"]
    assert after["status"] == "completed" and turn_of(after) == 3


def test_a_text_message_gets_a_reply(report: dict[str, Any]) -> None:
    assert messages(report)[6:] == [
        ("user", "completed", "hello"),
        ("assistant", "completed", "answer to turn 4: one two three four five ")]
    assert report["text"]["status"] == "completed" and turn_of(report["text"]) == 4


def test_an_error_reaches_the_sdks_error_event(report: dict[str, Any]) -> None:
    assert [e["code"] for e in report["errors"]] == ["item_retrieve_invalid_item_id"]
    assert said_turn(messages(report)[-1][2]) == 4  # and the session went on before it


def test_every_server_event_it_got_parses_with_the_openai_types(
        report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []


# -- tool(): the agent's function tool, called by the tone plugin (``call=get_weather``) --

WEATHER = "seventeen degrees and cloudy"


@pytest.fixture(scope="module")
def tools(drivers: Drivers) -> dict[str, Any]:
    return drivers.node("agents_realtime.mjs", "tools")


def test_the_sdk_declares_its_tool_in_the_session(tools: dict[str, Any]) -> None:
    [declared] = tools["session"]["tools"]
    assert (declared["type"], declared["name"]) == ("function", "get_weather")
    assert declared["parameters"]["required"] == ["city", "unit"]
    assert tools["session"]["tool_choice"] == "auto"


def test_a_spoken_turn_runs_the_tools_execute_with_the_calls_arguments(
        tools: dict[str, Any]) -> None:
    # the tone plugin's sample of the schema: "tone" for a string, an enum's first value
    assert tools["executed"] == [{"city": "tone", "unit": "celsius"}]
    assert tools["call"]["status"] == "completed"
    [call] = tools["call"]["output"]
    assert (call["type"], call["name"]) == ("function_call", "get_weather")
    assert json.loads(call["arguments"]) == {"city": "tone", "unit": "celsius"}


def test_the_session_reports_the_tool_starting_and_ending(tools: dict[str, Any]) -> None:
    [call] = tools["call"]["output"]
    said = {"call_id": call["call_id"], "name": "get_weather", "arguments": call["arguments"]}
    assert tools["tool_events"] == [
        {"event": "agent_tool_start", "tool": "get_weather", "call": said},
        {"event": "agent_tool_end", "tool": "get_weather", "result": WEATHER, "call": said}]


def test_the_tools_output_goes_back_and_the_reply_uses_it(tools: dict[str, Any]) -> None:
    assert [(w["type"], w["item_type"]) for w in tools["wire"]] == [
        ("response.output_item.added", "function_call"),
        ("conversation.item.added", "function_call"),
        ("response.function_call_arguments.delta", None),
        ("response.function_call_arguments.done", None),
        ("response.output_item.done", "function_call"),
        ("conversation.item.done", "function_call"),
        # the SDK's conversation.item.create of the output, confirmed
        ("conversation.item.added", "function_call_output"),
        ("conversation.item.done", "function_call_output")]
    reply = tools["reply"]
    assert reply["status"] == "completed" and reply["audio_ms"] > 0
    [call] = tools["call"]["output"]
    items = [(i["type"], i.get("role"), i["status"]) for i in tools["history"]]
    assert items == [("message", "user", "completed"),
                     ("function_call", None, "completed"),
                     ("message", "assistant", "completed")]
    function_call, answer = tools["history"][1], tools["history"][2]
    assert (function_call["name"], function_call["output"]) == ("get_weather", WEATHER)
    assert function_call["arguments"] == call["arguments"]
    assert WEATHER in answer["content"][0]["transcript"]  # as history_updated had it last
    assert tools["errors"] == []


def test_every_server_event_of_the_tool_call_parses_with_the_openai_types(
        tools: dict[str, Any]) -> None:
    assert {"response.function_call_arguments.done", "conversation.item.done"} <= {
        e["type"] for e in tools["server_events"]}
    assert rejected_events(tools, "ga") == []
