"""``@openai/agents-realtime`` with its defaults: a ``RealtimeAgent`` in a
``RealtimeSession`` on the WebSocket transport, told only the gateway's ``url``.

What its users rely on: the agent's instructions hold through the SDK's own default
``session.update`` (``semantic_vad``, ``tracing: auto``…); a spoken turn plays audio
and lands in ``history_updated`` with the user's transcript and the agent's; talking
over the agent interrupts it and the SDK's truncate leaves the history at what was
heard; a text message gets a reply; a bad request reaches the SDK's ``error`` event.
"""

from __future__ import annotations

from typing import Any

import pytest
from tier import Drivers, said_turn, turn_of


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
