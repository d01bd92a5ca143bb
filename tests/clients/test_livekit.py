"""LiveKit's ``livekit.plugins.openai.realtime.RealtimeModel`` with its defaults (only
``base_url`` and the key given), its ``RealtimeSession`` driven standalone.

What its users rely on: instructions hold through its default ``session.update``
(``semantic_vad`` medium, ``max_output_tokens: inf``, ``tracing: null``…);
``generate_reply`` and a spoken turn each bring a generation whose streams carry the
audio and the text, the user's transcript arrives, and ``chat_ctx`` mirrors the
conversation; ``interrupt`` + ``truncate`` after a barge-in is confirmed by the gateway;
no error reaches the session's ``error`` event on the way. With a ``function_tool``
(``update_tools``): a reply that calls it arrives on the generation's
``function_stream``, ``execute_function_call`` runs it, its output goes back through
``update_chat_ctx`` and the next reply says it; a reconnect's restored chat context
(calls and outputs included) is taken and answered.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tier import Drivers, rejected_events, said_turn, turn_of


@pytest.fixture(scope="module")
def report(drivers: Drivers) -> dict[str, Any]:
    return drivers.python("livekit", "livekit_realtime.py")


def test_instructions_hold_with_its_defaults(report: dict[str, Any]) -> None:
    assert report["session"]["instructions"] == "You are a helpful assistant. words=4"
    assert report["session"]["turn_detection"]["eagerness"] == "medium"
    greeting = report["greeting"]
    assert greeting["user_initiated"] is True
    assert greeting["transcript"] == "answer to turn 1: one two three four "
    assert greeting["audio_ms"] == 8 * 200 and turn_of(greeting) == 1


def test_a_spoken_turn_is_a_generation(report: dict[str, Any]) -> None:
    spoken = report["spoken"]
    assert spoken["user_initiated"] is False
    assert said_turn(spoken["transcript"]) == turn_of(spoken) == 2
    assert report["user_transcripts"][0] == "tone turn 2, 1000 ms of speech"


def test_interrupt_and_truncate(report: dict[str, Any]) -> None:
    cut = report["barge_in"]
    assert cut["truncated"] == {"item_id": cut["id"], "audio_end_ms": 600}
    assert 600 <= cut["audio_ms"] < 8 * 200 and turn_of(cut) == 3
    after = report["after_barge_in"]
    assert said_turn(after["transcript"]) == turn_of(after) == 4
    assert report["errors"] == []


def test_chat_ctx_mirrors_the_conversation(report: dict[str, Any]) -> None:
    roles = [h["role"] for h in report["history"]]
    assert roles == ["assistant"] + ["user", "assistant"] * 3
    assert report["history"][1]["text"] == "tone turn 2, 1000 ms of speech"


WEATHER = "seventeen degrees and cloudy"


def test_update_tools_offers_the_function_tool(report: dict[str, Any]) -> None:
    [tool] = report["tools"]
    assert (tool["type"], tool["name"]) == ("function", "get_weather")
    assert tool["parameters"]["required"] == ["city"]


def test_a_reply_calls_the_tool_and_the_sdk_runs_it(report: dict[str, Any]) -> None:
    called = report["tool_call"]
    assert called["user_initiated"] is True
    [call] = called["calls"]
    assert call["name"] == "get_weather" and call["call_id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"city": "tone"}  # the schema, sampled
    assert called["ran"] == [{"city": "tone"}]
    assert called["outputs"] == [{"call_id": call["call_id"], "output": WEATHER,
                                  "is_error": False}]


def test_the_output_sent_back_is_answered(report: dict[str, Any]) -> None:
    reply = report["tool_reply"]
    assert reply["transcript"] == f"the tool said {WEATHER} "
    assert reply["audio_ms"] == 7 * 200 and reply["user_initiated"] is True
    call_id = report["tool_call"]["calls"][0]["call_id"]
    assert report["tool_chat_ctx"][-3:] == [
        {"type": "function_call", "name": "get_weather", "call_id": call_id,
         "arguments": report["tool_call"]["calls"][0]["arguments"]},
        {"type": "function_call_output", "call_id": call_id, "output": WEATHER},
        {"type": "message", "role": "assistant", "text": reply["transcript"]}]
    assert report["tool_errors"] == [] and report["errors"] == []


def test_a_restored_chat_ctx_with_a_call_is_taken_and_answered(
        report: dict[str, Any]) -> None:
    assert [i["type"] for i in report["restore"]][-2:] == [
        "function_call", "function_call_output"]
    assert report["restored_errors"] == []
    assert report["restored_chat_ctx"] == report["restore"]
    assert report["restored_reply"]["transcript"] == f"the tool said {WEATHER} "


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []
