"""Helpers for the llama.cpp engine tests: an output router and a running engine."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import engine_router
import pytest
from engine_router import Router

from engines import build_engine
from engines.base import Prefill
from engines.llamacpp import LlamaCppEngine
from engines.stages import LlamaCppStage
from plugins.cascade.llm import LlmChoice
from plugins.cascade.model_cache import ModelCacheError
from plugins.cascade.thinker import ThinkerAdapter


def prefills_of(engine: LlamaCppEngine, request_id: str) -> list[Prefill]:
    return [p for p in engine.prefills if p.request_id == request_id]


def running(engine: LlamaCppEngine) -> contextlib.AbstractAsyncContextManager[Router]:
    """``engine.run()`` as a task (ready on entry), its outputs routed; on exit
    the run is cancelled (which shuts the server down)."""
    return engine_router.running(engine)


def default_stage(**overrides: int) -> LlamaCppStage:
    """The default thinker's stage (the bundled model; skipped when it is not there)."""
    choice = LlmChoice.from_env({})
    assert choice.engine == "llamacpp"
    try:
        model = choice.prepare(print)
    except ModelCacheError as exc:
        pytest.skip(str(exc))
    stage = choice.stage("think", ThinkerAdapter(), model)
    assert isinstance(stage, LlamaCppStage)
    return replace(stage, **overrides)


@dataclass
class Thinker:
    engine: LlamaCppEngine
    router: Router


@contextlib.asynccontextmanager
async def running_thinker(**overrides: int) -> AsyncIterator[Thinker]:
    """The default thinker's engine, running, its outputs routed."""
    engine = build_engine(1, default_stage(**overrides))
    assert isinstance(engine, LlamaCppEngine)
    async with running(engine) as router:
        yield Thinker(engine, router)
