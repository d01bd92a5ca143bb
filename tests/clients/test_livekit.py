"""LiveKit's ``livekit.plugins.openai.realtime.RealtimeModel`` with its defaults (only
``base_url`` and the key given), its ``RealtimeSession`` driven standalone.

What its users rely on: instructions hold through its default ``session.update``
(``semantic_vad`` medium, ``max_output_tokens: inf``, ``tracing: null``…);
``generate_reply`` and a spoken turn each bring a generation whose streams carry the
audio and the text, the user's transcript arrives, and ``chat_ctx`` mirrors the
conversation; ``interrupt`` + ``truncate`` after a barge-in is confirmed by the gateway;
no error reaches the session's ``error`` event on the way.
"""

from __future__ import annotations

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


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []
