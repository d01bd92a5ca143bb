"""The gateway's transcript of a turn is the listener model's offline transcript
of the same audio: nothing between the socket and the ASR (decoding, resampling,
the 100 ms units, the turn buffer, trimming) changes what is heard.

A real cascade gateway (its default ASR; the small SmolLM2 thinker, which these
turns never reach: no response is asked for) takes each clip at 24 kHz with
manual commits, so the turn's audio is exactly the clip; the same clip is
resampled to 16 kHz here and transcribed by ``ListenerModel`` in this process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from client import RealtimeClient
from gateway_process import GatewayProcess, running

from gateway.audio import resample
from plugins.base import Pcm
from plugins.cascade.asr import WhisperAsr
from plugins.cascade.listener import ListenerModel

pytest.importorskip("xllamacpp", reason="the [cpu] extra (xllamacpp) is not installed")
pytestmark = pytest.mark.slow

WIRE_RATE = 24000
CLIPS = ("Who painted the Mona Lisa?", "How many hearts does an octopus have?")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, asr: WhisperAsr) -> Iterator[GatewayProcess]:
    env = {"HF_HUB_OFFLINE": "1", "DUPLEX_GATEWAY_LLM_MODEL": "smollm2-135m-instruct"}
    with running(Path(tmp_path_factory.mktemp("asr")), "--plugin", "cascade", env=env,
                 timeout_s=300) as proc:
        yield proc


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


@pytest.mark.parametrize("text", CLIPS)
async def test_the_gateway_hears_what_the_model_hears_offline(
        agent: GatewayProcess, asr: WhisperAsr, say: Callable[[str], Pcm], text: str) -> None:
    pcm16 = np.concatenate([np.zeros(4000, np.int16), say(text), np.zeros(8000, np.int16)])
    pcm24 = resample(pcm16, 16000, WIRE_RATE)
    offline = ListenerModel(asr).transcribe(resample(pcm24, WIRE_RATE, 16000))
    c = await RealtimeClient.connect(agent.ws)
    try:
        await c.until("session.created")
        await c.send("session.update", session={"audio": {"input": {"turn_detection": None}}})
        await c.until("session.updated")
        await c.append(pcm24, frame_ms=100)
        await c.send("input_audio_buffer.commit")
        heard = await c.until("conversation.item.input_audio_transcription.completed",
                              timeout=60)
        assert not c.of("error")
    finally:
        await c.close()
    assert offline.strip(), "the model heard nothing offline"
    assert words(heard["transcript"]) == words(offline), (heard["transcript"], offline)
