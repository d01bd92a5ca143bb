"""Helpers for the llama.cpp engine tests: an output router and a running engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from engine_router import Router

from engines.llamacpp import LlamaCppEngine, Prefill


def prefills_of(engine: LlamaCppEngine, request_id: str) -> list[Prefill]:
    return [p for p in engine.prefills if p.request_id == request_id]


@contextlib.asynccontextmanager
async def running(engine: LlamaCppEngine) -> AsyncIterator[Router]:
    """``engine.run()`` as a task (ready on entry), its outputs routed; on exit
    the run is cancelled (which shuts the server down)."""
    task = asyncio.create_task(engine.run())
    router = Router(engine)
    router.start()
    try:
        ready = asyncio.create_task(engine.wait_ready())
        await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raise why it stopped
        await ready
        yield router
    finally:
        await router.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
