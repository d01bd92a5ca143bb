"""Stage engines: where a plugin's model code runs (``engines.base`` is the contract).

- ``in_process``: a ``StageModel`` on worker threads of this process;
- ``vllm``: a resumable LLM stage on vLLM's ``AsyncLLM`` (vLLM imported lazily).

``build_engine`` is the one place that turns a plugin's stage into its engine,
for the gateway and the tests alike.
"""

from __future__ import annotations

from engines.base import StageEngine
from plugins.base import InProcessStage, ResumableLlmStage, Stage


def build_engine(index: int, stage: Stage) -> StageEngine:
    """The engine that serves stage ``index`` of a plugin."""
    match stage:
        case InProcessStage():
            from engines.in_process import InProcessEngine

            return InProcessEngine(index, stage.name, stage.model, threads=stage.threads)
        case ResumableLlmStage():
            from engines.vllm import VllmEngine, make_async_llm

            make = make_async_llm(str(stage.model_dir), **stage.engine_args)
            return VllmEngine(index, stage.name, stage.adapter, make, sampling=stage.sampling)
    raise TypeError(f"unknown stage kind {type(stage).__name__}")
