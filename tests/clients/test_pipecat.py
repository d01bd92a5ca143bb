"""pipecat's ``OpenAIRealtimeLLMService``, pinned in its own environment, in a minimal
pipeline: server VAD (the gateway's) and manual mode (``turn_detection=False``, the
app's VAD frames commit each turn).

What its users rely on: the system instruction holds; the context makes the bot speak
first; a spoken turn comes back as ``TTSAudioRawFrame``s and ``TTSTextFrame``s with the
user's ``TranscriptionFrame`` upstream; talking over a reply truncates it (server VAD:
the service on ``speech_started``; manual: the app's ``InterruptionFrame``) and
``retrieve_conversation_item`` shows the cut item; an unknown item is an exception
the session survives, not an ``ErrorFrame`` that ends it.
"""

from __future__ import annotations

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


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []
