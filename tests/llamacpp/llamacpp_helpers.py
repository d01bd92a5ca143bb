"""Helpers for the llama.cpp engine tests: an output router and a running engine."""

from __future__ import annotations

import contextlib

import engine_router
from engine_router import Router

from engines.llamacpp import LlamaCppEngine, Prefill


def prefills_of(engine: LlamaCppEngine, request_id: str) -> list[Prefill]:
    return [p for p in engine.prefills if p.request_id == request_id]


def running(engine: LlamaCppEngine) -> contextlib.AbstractAsyncContextManager[Router]:
    """``engine.run()`` as a task (ready on entry), its outputs routed; on exit
    the run is cancelled (which shuts the server down)."""
    return engine_router.running(engine)
