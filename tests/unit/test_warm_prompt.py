"""The first turn is like the others: what llama.cpp prefills before ``/readyz``
says ready is the prefix every new session's thinker request starts with."""

from __future__ import annotations

from duplex.fence import Fence
from duplex.tools import NO_TOOLS
from engines.stages import LlamaCppStage
from plugins.base import Context
from plugins.cascade.llm import LlmChoice
from plugins.cascade.thinker import DEFAULT_INSTRUCTIONS, ThinkerAdapter


def test_the_warm_prompt_is_the_prefix_of_a_new_sessions_request() -> None:
    thinker = ThinkerAdapter()
    warm = thinker.opening_prompt()
    assert DEFAULT_INSTRUCTIONS in warm
    for instructions in ("", None):  # a session that never set instructions
        state = thinker.open(Fence("sess", 1, 0, 0))
        first = thinker.plan(state, Context(instructions, (), NO_TOOLS))
        assert first is not None and first.text.startswith(warm)


def test_the_llamacpp_stage_carries_it() -> None:
    choice = LlmChoice.from_env({"DUPLEX_GATEWAY_LLM_ENGINE": "llamacpp"})
    stage = choice.stage("think", ThinkerAdapter(), "model.gguf", "PREFIX")
    assert isinstance(stage, LlamaCppStage) and stage.warm_prompt == "PREFIX"
    assert choice.stage("think", ThinkerAdapter(), "model.gguf").warm_prompt == ""
