"""pipecat's ``OpenAIRealtimeLLMService``, pinned in its own environment, in a minimal
pipeline: server VAD (the gateway's) and manual mode (``turn_detection=False``, the
app's VAD frames commit each turn).

What its users rely on: the system instruction holds; the context makes the bot speak
first; a spoken turn comes back as ``TTSAudioRawFrame``s and ``TTSTextFrame``s with the
user's ``TranscriptionFrame`` upstream; talking over a reply truncates it (server VAD:
the service on ``speech_started``; manual: the app's ``InterruptionFrame``) and
``retrieve_conversation_item`` shows the cut item; an unknown item is an exception
the session survives, not an ``ErrorFrame`` that ends it. A function registered with
``register_function`` and offered by the context's ``ToolsSchema`` is called by a reply:
the handler runs with the model's arguments, the service sends its result back as the
call's output, and the next reply (which the app's assistant aggregator asks for) says it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tier import Drivers, rejected_events, said_turn, turn_of


@pytest.fixture(scope="module", params=["vad", "manual"])
def report(request: pytest.FixtureRequest, drivers: Drivers) -> dict[str, Any]:
    return drivers.python("pipecat", "pipecat_realtime.py", request.param)


def test_the_context_starts_it_with_the_instructions_applied(report: dict[str, Any]) -> None:
    greeting = report["greeting"]
    assert greeting["transcript"] == "answer to turn 1: one two three "
    assert greeting["audio_ms"] == 7 * 200 and turn_of(greeting) == 1


def test_a_spoken_turn_in_frames(report: dict[str, Any]) -> None:
    turn = report["turn"]
    assert turn["user_transcript"].endswith(", 1000 ms of speech")
    assert said_turn(turn["transcript"]) == turn_of(turn) == 2
    assert turn["audio_ms"] == 7 * 200


def test_talking_over_a_reply_truncates_it(report: dict[str, Any]) -> None:
    cut = report["barge_in"]
    assert turn_of(cut) == 3
    assert cut["kept"]["status"] == "incomplete"
    heard = cut["kept"]["transcript"].split()
    assert heard[:2] == ["answer", "to"] and len(heard) < 7  # ~600 ms of seven words
    after = report["after_barge_in"]
    assert said_turn(after["transcript"]) == turn_of(after) == 4


def test_an_unknown_item_is_not_fatal(report: dict[str, Any]) -> None:
    assert "does not exist" in report["missing_item"]
    assert report["errors"] == []
    assert [h["role"] for h in report["history"]] == ["assistant"] + ["user", "assistant"] * 3


WEATHER = "seventeen degrees and cloudy"


@pytest.fixture(scope="module")
def tools_report(drivers: Drivers) -> dict[str, Any]:
    return drivers.python("pipecat", "pipecat_realtime.py", "tools")


def test_a_reply_calls_the_registered_function(tools_report: dict[str, Any]) -> None:
    tool = tools_report["tool"]
    started = tool["in_progress"]
    assert started["name"] == "get_weather" and started["id"].startswith("call_")
    assert started["arguments"] == {"city": "tone"}  # the schema's required string, sampled
    assert tool["handler"] == [{"arguments": {"city": "tone"}, "id": started["id"]}]
    assert tool["result"] == {"id": started["id"], "result": WEATHER}


def test_the_result_is_sent_back_and_answered(tools_report: dict[str, Any]) -> None:
    tool = tools_report["tool"]
    call_id = tool["in_progress"]["id"]
    sent = json.dumps(WEATHER)  # pipecat sends a result as JSON
    assert tool["sent"] == [{"call_id": call_id, "output": sent}]
    assert tool["reply"]["transcript"] == f"the tool said {sent} "
    assert tool["reply"]["audio_ms"] == 7 * 200
    call, result = tool["context"]
    assert [c["id"] for c in call["tool_calls"]] == [call_id]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"city": "tone"}
    assert (result["role"], result["tool_call_id"], result["content"]) == ("tool", call_id, sent)
    assert tools_report["errors"] == []


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []
