"""The ``openai-agents`` Python SDK's ``RealtimeAgent`` with a ``@function_tool``, run by
its ``RealtimeRunner`` with only the gateway's ``url`` and key in the model config.

What its users rely on: a spoken turn whose reply calls the agent's tool makes the SDK
run the real function with the model's arguments, tell the app (``tool_start``,
``tool_end``), send the output back and get a spoken reply that uses it; the SDK's
history holds the call with its output and the reply's transcript.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tier import Drivers

WEATHER = "seventeen degrees and cloudy"


@pytest.fixture(scope="module")
def report(drivers: Drivers) -> dict[str, Any]:
    return drivers.python("agents", "openai_agents.py")


def test_the_sdk_runs_the_tool_the_reply_calls(report: dict[str, Any]) -> None:
    # the tone plugin samples the schema: "tone" for the required string
    assert report["calls"] == [{"city": "tone"}]
    assert report["tool_start"]["tool"] == "get_weather"
    assert json.loads(report["tool_start"]["arguments"]) == {"city": "tone"}
    assert report["tool_end"] == {**report["tool_start"], "output": WEATHER}


def test_the_reply_after_the_tool_says_its_output(report: dict[str, Any]) -> None:
    reply = report["reply"]
    assert reply["transcript"] == f"the tool said {WEATHER} "
    assert reply["audio_ms"] == 7 * 200  # a 200 ms word each
    history = report["history"]
    said = next(h for h in history if h["id"] == reply["id"])
    assert (said["role"], said["status"]) == ("assistant", "completed")
    assert WEATHER in said["text"]
    assert report["errors"] == []


def test_the_history_holds_the_call_and_its_output(report: dict[str, Any]) -> None:
    kinds = [(h["type"], h.get("role")) for h in report["history"]]
    call = next(h for h in report["history"] if h["type"] == "function_call")
    assert (call["name"], call["output"]) == ("get_weather", WEATHER)
    assert json.loads(call["arguments"]) == {"city": "tone"}
    # the user's turn, the call it brought, then the reply that used the output
    assert kinds.index(("message", "user")) < kinds.index(("function_call", None)) < \
        [h["id"] for h in report["history"]].index(report["reply"]["id"])
