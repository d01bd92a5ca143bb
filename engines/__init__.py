"""Stage engines: where a plugin's model code runs.

The contract has two faces: ``engines.stages``, what a plugin hands the engines
(its stages and their model code), and ``engines.base``, what the orchestrator
sees of an engine. Neither knows sessions, plugins or the duplex core.

- ``in_process``: a ``StageModel`` on worker threads of this process;
- ``on_loop``: a ``StageModel`` of microsecond steps on the event loop
  (``InProcessStage(threads=0)``);
- ``vllm``: a resumable LLM stage on vLLM's ``AsyncLLM`` (vLLM imported lazily);
- ``llamacpp``: a resumable LLM stage on an in-process llama.cpp server
  (``xllamacpp``, imported lazily);
- ``chat_server``: a conversation on an OpenAI-compatible server apart from
  the gateway (``ChatServerStage``; HTTP in ``model_http``).

``build_engine`` is the one place that turns a plugin's stage into its engine,
for the gateway and the tests alike.
"""

from __future__ import annotations

from typing import Any

from engines.base import StageEngine
from engines.stages import (
    ChatServerStage,
    InProcessStage,
    LlamaCppStage,
    ResumableLlmStage,
    Stage,
)


def build_engine(index: int, stage: Stage) -> StageEngine:
    """The engine that serves stage ``index`` of a plugin."""
    match stage:
        case InProcessStage(threads=0):
            from engines.on_loop import LoopEngine

            return LoopEngine(index, stage.name, stage.model)
        case InProcessStage():
            from engines.in_process import InProcessEngine

            return InProcessEngine(index, stage.name, stage.model, threads=stage.threads,
                                   max_pending_inputs=stage.max_pending_inputs)
        case ResumableLlmStage():
            from engines.vllm import VllmEngine, make_async_llm

            make = make_async_llm(str(stage.model_dir), **stage.engine_args)
            return VllmEngine(index, stage.name, stage.adapter, make, sampling=stage.sampling)
        case LlamaCppStage():
            return _llamacpp_engine(index, stage)
        case ChatServerStage():
            from engines.chat_server import ChatServerEngine

            return ChatServerEngine(index, stage.name, stage.adapter, stage.server,
                                    sampling=stage.sampling)
    raise TypeError(f"unknown stage kind {type(stage).__name__}")


def _llamacpp_engine(index: int, stage: LlamaCppStage) -> StageEngine:
    from engines.llamacpp import LlamaCppEngine
    from engines.llamacpp_server import ServerConfig, start_server, warm_prompt_cache

    config = ServerConfig(stage.model, n_ctx=stage.n_ctx, parallel=stage.parallel,
                          threads=stage.threads, batch_threads=stage.threads)
    def make_server() -> Any:
        server = start_server(config)
        if stage.warm_prompt:
            warm_prompt_cache(server, stage.warm_prompt, stage.sampling or {})
        return server

    return LlamaCppEngine(index, stage.name, stage.adapter, make_server,
                          n_ctx=stage.n_ctx, parallel=stage.parallel, sampling=stage.sampling)
