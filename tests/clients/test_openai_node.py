"""npm ``openai``: ``OpenAIRealtimeWS`` and ``OpenAIRealtimeWebSocket`` over wss://, with
server VAD and with manual turns (commit + ``response.create``).

What their users rely on: the URL the SDK builds from ``baseURL`` (always wss://)
reaches the gateway with the key; the key in the Bearer header (``ws``) or the
browser's subprotocol (``websocket``) is accepted; a spoken turn brings back audio
answering that turn, the user's transcript and the assistant's; an interruption
cancels the reply and the client's truncate is confirmed; the history events arrive;
an error reaches the SDK's ``error`` listener.
"""

from __future__ import annotations

from typing import Any

import pytest
from tier import Drivers, rejected_events, said_turn, turn_of

CASES = [pytest.param(k, m, id=f"{k}-{m}") for k in ("ws", "websocket") for m in ("vad", "manual")]


@pytest.fixture(scope="module", params=[c.values for c in CASES], ids=[c.id for c in CASES])
def report(request: pytest.FixtureRequest, drivers: Drivers) -> dict[str, Any]:
    klass, mode = request.param
    return {"mode": mode, **drivers.node("openai_realtime.mjs", klass, mode)}


def test_it_dials_wss_with_the_key_and_the_errors_reach_its_listener(
        report: dict[str, Any]) -> None:
    assert report["url"].startswith("wss://127.0.0.1:")
    assert report["url"].endswith("/v1/realtime?model=duplex-gateway")
    assert report["session_id"].startswith("sess_")
    assert report["errors"][0]["code"] == "response_cancel_not_active"
    assert report["errors"][0]["event_id"] == "evt_idle"


def test_its_session_update_holds(report: dict[str, Any]) -> None:
    assert report["session"]["instructions"] == "words=3"
    detection = report["session"]["turn_detection"]
    if report["mode"] == "vad":
        assert detection["type"] == "server_vad" and detection["silence_duration_ms"] == 300
    else:
        assert detection is None


def test_a_spoken_turn_brings_audio_and_both_transcripts(report: dict[str, Any]) -> None:
    turn = report["turn1"]
    assert turn["status"] == "completed"
    assert turn["transcript"] == turn["output_transcript"] == "answer to turn 1: one two three "
    assert turn["audio_ms"] == 7 * 200  # "words=3": seven words, 200 ms each
    assert turn_of(turn) == said_turn(turn["transcript"]) == 1
    assert turn["user_transcript"].endswith(", 1000 ms of speech")


def test_an_interrupted_reply_is_truncated(report: dict[str, Any]) -> None:
    cut = report["interrupted"]
    assert cut["status"] == "cancelled"
    assert cut["reason"] == ("turn_detected" if report["mode"] == "vad" else "client_cancelled")
    assert 0 < cut["audio_ms"] < 64 * 200  # cut short of "words=60"
    assert cut["truncated"] == {"item_id": cut["item_id"], "audio_end_ms": cut["sent_ms"]}
    assert turn_of(cut) == 2


def test_the_interrupting_speech_is_a_turn_of_its_own(report: dict[str, Any]) -> None:
    if report["mode"] == "vad":
        assert turn_of(report["turn3"]) == 3
    else:  # the client cancelled; nobody spoke over the reply, so no third reply
        assert "turn3" not in report and report["counts"]["response.created"] == 2


def test_history_events_tell_each_item(report: dict[str, Any]) -> None:
    turns = 3 if report["mode"] == "vad" else 2
    added = [(h["role"], h["status"]) for h in report["history"]
             if h["type"] == "conversation.item.added"]
    assert added == [("user", "completed"), ("assistant", "in_progress")] * turns
    done = [(h["role"], h["status"]) for h in report["history"]
            if h["type"] == "conversation.item.done"]
    assert done[:4] == [("user", "completed"), ("assistant", "completed"),
                        ("user", "completed"), ("assistant", "incomplete")]
    assert report["counts"]["input_audio_buffer.committed"] == turns


def test_every_server_event_it_got_parses_with_the_openai_types(report: dict[str, Any]) -> None:
    assert rejected_events(report, "ga") == []
