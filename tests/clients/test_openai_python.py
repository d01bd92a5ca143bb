"""The ``openai`` Python package, pinned in its own environment: GA
(``client.realtime``) and beta (``client.beta.realtime``, ``OpenAI-Beta: realtime=v1``).

What its users rely on: ``websocket_base_url`` over wss://, typed events of the
dialect asked for (beta names for beta), audio and transcripts of a spoken turn,
barge-in with the SDK's truncate confirmed, history events, and errors as the
SDK's error event.
"""

from __future__ import annotations

from typing import Any

import pytest
from tier import Drivers, rejected_events, said_turn, turn_of


@pytest.fixture(scope="module", params=["ga", "beta"])
def report(request: pytest.FixtureRequest, drivers: Drivers) -> dict[str, Any]:
    return {"dialect": request.param,
            **drivers.python("openai", "openai_python.py", request.param)}


def test_events_parse_into_the_dialects_own_models(report: dict[str, Any]) -> None:
    models = dict(m.split(":") for m in report["models"])
    if report["dialect"] == "ga":
        assert models["response.output_audio.delta"] == "ResponseAudioDeltaEvent"
        assert models["conversation.item.added"] == "ConversationItemAdded"
        assert models["error"] == "RealtimeErrorEvent"
        assert not any(t.startswith("response.audio.") for t in models)
    else:
        assert models["response.audio.delta"] == "ResponseAudioDeltaEvent"
        assert models["conversation.item.created"] == "ConversationItemCreatedEvent"
        assert models["error"] == "ErrorEvent"
        assert not any(t.startswith("response.output_audio") for t in models)
    assert report["error"]["code"] == "response_cancel_not_active"
    assert report["error"]["event_id"] == "evt_idle"


def test_a_spoken_turn(report: dict[str, Any]) -> None:
    turn = report["turn1"]
    assert report["session"]["instructions"] == "words=3"
    assert turn["status"] == "completed" and turn["audio_ms"] == 7 * 200
    assert said_turn(turn["transcript"]) == turn_of(turn) == 1
    assert turn["user_transcript"] == "tone turn 1, 1000 ms of speech"


def test_a_barge_in_is_cancelled_and_truncated(report: dict[str, Any]) -> None:
    cut = report["barge_in"]
    assert (cut["status"], cut["reason"]) == ("cancelled", "turn_detected")
    assert cut["truncated"] == {"item_id": cut["item_id"], "audio_end_ms": cut["sent_ms"]}
    assert turn_of(cut) == 2 and turn_of(report["turn3"]) == 3
    assert [h["role"] for h in report["history"]] == ["user", "assistant"] * 3


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, report["dialect"]) == []
