"""The ``session.update``s popular OpenAI Realtime clients send by default are taken whole.

Each payload below is what that client's released package sends with its
default settings, read from its source (not its code: its output, as data):

- ``@openai/agents-realtime`` 0.20.0 (npm), ``OpenAIRealtimeWebSocket``:
  ``updateSessionConfig`` (``_getMergedSessionConfig`` over
  ``DEFAULT_OPENAI_REALTIME_SESSION_CONFIG``), then, on ``session.created``,
  ``_updateTracingConfig('auto')``;
- ``openai-agents`` 0.24.0 (PyPI), ``OpenAIRealtimeWebSocketModel``:
  ``_get_session_config(DEFAULT_MODEL_SETTINGS)`` dumped ``exclude_unset``, then
  ``_send_tracing_config("auto")``;
- ``livekit-agents``/``livekit-plugins-openai`` 1.8.9 (PyPI), ``RealtimeModel()``:
  ``_create_session_update_event`` on connect (no instructions yet, ``tracing``
  null), then ``update_instructions``;
- ``pipecat-ai`` 1.14.0 (PyPI), ``OpenAIRealtimeLLMService`` with the session
  properties of its docs' example (``SessionProperties`` dumped ``exclude_none``,
  with an ``event_id``): instructions and tools in one update.

The instructions must survive every one of them, ``session.updated`` must say
so (with the turn detection asked for), and the reply must follow them (the
tone plugin says ``words=K`` words).
"""

from __future__ import annotations

from typing import Any

import pytest
from client import RealtimeClient, silence, tone
from gateway_process import GatewayProcess

PCM = {"type": "audio/pcm", "rate": 24000}
WEATHER_TOOL = {"type": "function", "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}

AGENTS_JS = [
    {"type": "realtime", "instructions": "You are a helpful assistant. words=2",
     "model": "gpt-realtime-2.1", "output_modalities": ["audio"],
     "audio": {"input": {"format": PCM, "noise_reduction": None,
                         "transcription": {"model": "gpt-4o-mini-transcribe"},
                         "turn_detection": {"type": "semantic_vad"}},
               "output": {"format": PCM, "speed": 1}},
     "tools": [WEATHER_TOOL]},
    {"type": "realtime", "tracing": "auto"},
]
AGENTS_PY = [
    {"type": "realtime", "model": "gpt-realtime-2.1", "output_modalities": ["audio"],
     "audio": {"input": {"format": PCM, "transcription": {"model": "gpt-4o-mini-transcribe"},
                         "turn_detection": {"type": "semantic_vad",
                                            "interrupt_response": True}},
               "output": {"voice": "ash", "format": PCM}},
     "tools": [WEATHER_TOOL], "instructions": "You are a helpful assistant. words=3"},
    {"type": "realtime", "model": "gpt-realtime-2.1", "tracing": "auto"},
]
LIVEKIT = [
    {"type": "realtime",
     "audio": {"input": {"format": PCM, "noise_reduction": None,
                         "transcription": {"model": "gpt-4o-mini-transcribe"},
                         "turn_detection": {"type": "semantic_vad", "create_response": True,
                                            "eagerness": "medium",
                                            "interrupt_response": True}},
               "output": {"format": PCM, "speed": 1.0, "voice": "marin"}},
     "max_output_tokens": "inf", "model": "gpt-realtime", "output_modalities": ["audio"],
     "tool_choice": "auto", "tracing": None},
    {"type": "realtime", "instructions": "You are a helpful assistant. words=4"},
]
PIPECAT = [
    {"type": "realtime", "instructions": "You are a helpful assistant. words=6",
     "audio": {"input": {"transcription": {"model": "gpt-realtime-whisper"},
                         "noise_reduction": {"type": "near_field"},
                         "turn_detection": {"type": "semantic_vad"}}},
     "tools": [WEATHER_TOOL]},
]

CLIENTS = [
    pytest.param(AGENTS_JS, "auto", 2, id="openai-agents-realtime-js"),
    pytest.param(AGENTS_PY, "auto", 3, id="openai-agents-python"),
    pytest.param(LIVEKIT, "medium", 4, id="livekit"),
    pytest.param(PIPECAT, "auto", 6, id="pipecat"),
]


@pytest.mark.parametrize(("updates", "eagerness", "words"), CLIENTS)
async def test_a_clients_default_updates_keep_its_instructions(
        gateway: GatewayProcess, updates: list[dict[str, Any]], eagerness: str,
        words: int) -> None:
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.until("session.created")
        for i, session in enumerate(updates):
            await c.send("session.update", event_id=f"evt_update_{i}", session=session)
            updated = (await c.until("session.updated"))["session"]
        assert not c.of("error")
        instructions = next(u["instructions"] for u in updates if "instructions" in u)
        assert updated["instructions"] == instructions
        assert updated["audio"]["input"]["turn_detection"] == {
            "type": "semantic_vad", "eagerness": eagerness, "create_response": True,
            "interrupt_response": True}
        await c.append(tone(0.5))
        await c.append(silence(1.5))
        done = await c.until("response.done")
        said = done["response"]["output"][0]["content"][0]["transcript"].split()
        assert len(said) == 4 + words  # "answer to turn 1:" and then K number words
    finally:
        await c.close()


async def test_a_bad_field_changes_nothing_and_is_named(client: RealtimeClient) -> None:
    """OpenAI's behaviour: the whole update is refused, the error says which field."""
    await client.send("session.update", session={"instructions": "words=2"})
    await client.until("session.updated")
    bad = {**AGENTS_JS[0], "instructions": "words=9"}
    bad["audio"] = {**bad["audio"], "input": {
        **bad["audio"]["input"], "turn_detection": {"type": "semantic_vad",
                                                     "eagerness": "very"}}}
    await client.send("session.update", event_id="evt_bad", session=bad)
    error = (await client.until("error"))["error"]
    assert error == {
        "type": "invalid_request_error", "code": "invalid_value",
        "message": "Invalid value: 'very'. Supported values are: 'low', 'medium', 'high' "
                   "and 'auto'.",
        "param": "session.audio.input.turn_detection.eagerness", "event_id": "evt_bad"}
    await client.append(tone(0.5))
    await client.append(silence(1.0))
    done = await client.until("response.done")
    said = done["response"]["output"][0]["content"][0]["transcript"].split()
    assert len(said) == 4 + 2  # the instructions before the refused update
    assert not [e for e in client.events if e["type"] == "session.updated"
                and e["session"]["instructions"] == "words=9"]
