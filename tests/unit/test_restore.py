"""Rebuilding a session from what Redis holds: config round trip, history, lost turns."""

from __future__ import annotations

import json

import pytest

from duplex.config import AudioFormat, SessionConfig, TurnDetection
from duplex.store.base import SessionRecord
from duplex.tools import Tool, ToolChoice, ToolSet
from gateway.session.restore import config_from_json, core_from_record, unfinished_response
from tests.effect_helpers import said

CONFIGS = [
    SessionConfig(),
    SessionConfig(instructions="be brief", output_modalities=("text",),
                  input_format=AudioFormat.PCMU, output_format=AudioFormat.PCMA,
                  turn_detection=None, transcription=None, max_output_tokens=50),
    SessionConfig(turn_detection=TurnDetection(threshold=0.7, prefix_padding_ms=100,
                                               silence_duration_ms=900,
                                               interrupt_response=False)),
    SessionConfig(tools=ToolSet((Tool("get_weather", "the weather", {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        Tool("get_time")), ToolChoice("function", "get_time"))),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_config_survives_its_wire_form(config: SessionConfig) -> None:
    assert config_from_json(json.dumps(config.wire("sess_x"))) == config


@pytest.mark.parametrize("text", ["", "{}"])
def test_an_unset_config_is_the_default(text: str) -> None:
    assert config_from_json(text) == SessionConfig()


def record(**changes: object) -> SessionRecord:
    base: dict[str, object] = dict(
        session_id="sess_r", owner="p2", incarnation=2, epoch=3, turn_id=5, generation=4,
        last_seq=40, state="open", config="{}", resume_token_digest="d", created_at=1.0,
        last_activity=2.0, detached_at=None)
    base.update(changes)
    return SessionRecord(**base)  # type: ignore[arg-type]


def test_core_resumes_the_fence_and_the_honest_history() -> None:
    items = [{"id": "a", "type": "message", "role": "user",
              "content": [{"type": "input_audio", "transcript": "hi"}]},
             {"id": "b", "type": "message", "role": "assistant",
              "content": [{"type": "output_audio", "transcript": "hello th"}]}]
    core = core_from_record(record(), [json.dumps(i) for i in items], beta=True)
    assert (core.fence.incarnation, core.fence.epoch, core.fence.turn_id) == (2, 3, 5)
    assert list(core.items) == ["a", "b"]
    assert said(core) == [("user", "hi"), ("assistant", "hello th")]
    assert core.beta and core.response is None


def ev(kind: str, rid: str) -> str:
    return json.dumps({"type": kind, "response": {"id": rid}})


@pytest.mark.parametrize(("journal", "lost"), [
    ([], None),
    ([ev("response.created", "r1"), ev("response.done", "r1")], None),
    ([ev("response.created", "r1")], "r1"),
    ([ev("response.created", "r1"), ev("response.done", "r1"), ev("response.created", "r2")],
     "r2"),
    ([json.dumps({"type": "session.created"})], None),
])
def test_unfinished_response(journal: list[str], lost: str | None) -> None:
    assert unfinished_response(enumerate(journal, 1)) == lost
