"""A sequential (Pipecat-style) voice pipeline on the cascade's own models, the
baseline ``bench/voice_latency.py`` and ``bench/voice_quiz.py`` print next to
the gateway's agent, measured on the same audio in the same run.

Each step waits for the one before it, as Pipecat's default pipeline does: the
VAD (the cascade's Silero, ``server_vad`` defaults) ends the turn after its
silence window, then the whole turn is transcribed (the same Whisper), then
the LLM runs until its first whole sentence (the same GGUF on llama.cpp, same
threads, prompt cache on), then that sentence is synthesised whole (the same
piper voice). No drafts, no overlap. Its mouth to ear is the sum of the four
(no network: it runs in this process, after the gateway has stopped, so the
two never share the cores).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from gateway.audio import resample

RATE = 24000
ASR_RATE = 16000
CHUNK = ASR_RATE * 20 // 1000  # the VAD is fed 20 ms at a time, as a client sends
STEPS = ("turn_detection", "transcribe", "think", "speak")


class Sequential:
    """The baseline's models, loaded once; ``turn`` answers one spoken turn."""

    def __init__(self, ears: Any, piper: Any, env: Mapping[str, str] | None = None) -> None:
        from engines.llamacpp_server import ServerConfig, start_server
        from plugins.cascade.llm import LlmChoice
        from plugins.cascade.thinker import CHATML, DEFAULT_INSTRUCTIONS

        self.ears, self.piper, self.chat = ears, piper, CHATML
        choice = LlmChoice.from_env(dict(env or {}))
        self.server = start_server(ServerConfig(
            choice.prepare(lambda _: None), n_ctx=4096, parallel=1, threads=choice.threads,
            batch_threads=choice.threads))
        self.context = ""
        self.default_instructions = DEFAULT_INSTRUCTIONS
        self.new_conversation()

    def new_conversation(self, instructions: str | None = None) -> None:
        self.context = self.chat.turn("system", instructions or self.default_instructions)

    def instruct(self, text: str) -> None:
        self.context += self.chat.turn("system", text)

    def turn(self, pcm24: np.ndarray) -> dict[str, Any]:
        """``pcm24`` (the question and the silence after it, 24 kHz) through the four
        steps; each step's ms, ``mouth_to_ear``, and the words heard and said."""
        from plugins.cascade.thinker import LLAMACPP_SAMPLING

        pcm = resample(pcm24, RATE, ASR_RATE)
        waited_ms, end = vad_end(pcm)
        t0 = time.perf_counter()
        text = self.ears.transcribe(pcm[:end])
        t_asr = time.perf_counter()
        prompt = self.context + self.chat.turn("user", text) + self.chat.opening("assistant")
        answer, t_sentence = first_sentence(self.server, prompt, LLAMACPP_SAMPLING)
        sentence = re.split(r"(?<=[.!?])\s", answer.strip(), maxsplit=1)[0]
        t_tts = time.perf_counter()
        next(iter(self.piper.synthesize(sentence)), None)
        t_audio = time.perf_counter()
        self.context = prompt + answer + self.chat.closing
        row = {"turn_detection": waited_ms, "transcribe": 1000 * (t_asr - t0),
               "think": 1000 * (t_sentence - t_asr), "speak": 1000 * (t_audio - t_tts)}
        return {**row, "mouth_to_ear": sum(row.values()), "heard": text, "said": answer}


def vad_end(pcm16k: np.ndarray) -> tuple[float, int]:
    """Feed the cascade's VAD 20 ms at a time: (ms it listened past the end of
    speech before it ended the turn, the sample where it ended it). With no
    turn ended, the whole clip at no wait."""
    from duplex.config import TurnDetection
    from plugins.cascade.vad import SileroVad

    vad = SileroVad(TurnDetection())
    for start in range(0, len(pcm16k), CHUNK):
        for event in vad.process(pcm16k[start:start + CHUNK]):
            if not event.started:
                heard = min(start + CHUNK, len(pcm16k))
                return 1000 * heard / ASR_RATE - event.audio_ms, heard
    return 0.0, len(pcm16k)


def first_sentence(server: Any, prompt: str, sampling: Any) -> tuple[str, float]:
    """The whole reply, and when its first sentence was complete (as a sentence
    aggregator before TTS sees it)."""
    from engines.llamacpp_server import stream_completion

    reply: list[str] = []
    done_at: list[float] = []

    def on_delta(delta: Any) -> bool:
        reply.append(delta.text)
        if not done_at and (re.search(r"[.!?](\s|$)", "".join(reply)) or delta.finish):
            done_at.append(time.perf_counter())
        return False

    stream_completion(server, prompt, 80, sampling, on_delta)
    return "".join(reply), done_at[0] if done_at else time.perf_counter()
