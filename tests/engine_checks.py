"""What both resumable LLM engines (llama.cpp, vLLM) are tested to do alike, driven
by the echo adapter (``echo_adapter``) on each one's tiny model: each check takes
the texts that model is prompted with. A module of its own: ``conftest`` is a name
every test folder shares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from echo_adapter import Boom, Canned, Ctx, Gen, Piece, Tiny, fresh, pieces

from engines.base import StageEngine, StageOutput, UnknownRequest


def no_such_model() -> Any:
    """A model factory that fails the engine's start."""
    raise OSError("no such model")


async def check_canned_output_waits(t: Tiny[Any], prompt: str) -> None:
    """A canned output comes after the generation submitted before it."""
    rid, fence = fresh()
    await t.engine.submit_initial(rid, fence, Gen("G", prompt, 10))
    await t.engine.submit_update(rid, Canned("C"))
    got = await pieces(t, rid, 2)
    assert got[-1] == Piece("C", "", True)
    assert all(p.label == "G" for p in got[:-1])
    await t.engine.abort([rid])


async def check_plan_failure_fails_only_its_request(t: Tiny[Any], context: str,
                                                    reply: str) -> None:
    """A payload the adapter fails to plan fails its request, not another's."""
    bad, bad_fence = fresh()
    good, good_fence = fresh()
    await t.engine.submit_initial(bad, bad_fence, Ctx(context))
    await t.engine.submit_initial(good, good_fence, Ctx(context))
    await t.engine.submit_update(bad, Boom("plan"))
    out = await t.router.next(bad)
    assert out.result is None and out.error is not None and "plan exploded" in out.error
    assert not t.engine.has_request(bad)
    with pytest.raises(UnknownRequest):
        await t.engine.submit_update(bad, Ctx("z"))
    await t.engine.submit_update(good, Gen("ok", reply, 3))
    assert (await pieces(t, good, 1))[-1].finished
    await t.engine.abort([good])


async def check_on_text_failure_fails_the_request(t: Tiny[Any]) -> None:
    rid, fence = fresh()
    await t.engine.submit_initial(rid, fence, Boom("text"))
    out = await t.router.next(rid)
    assert out.error is not None and "on_text exploded" in out.error
    assert not t.engine.has_request(rid)


async def check_full_context_restarts(t: Tiny[Any], context: str, turn: Callable[[int], str],
                                      turns: int, budget: int) -> str:
    """``turns`` turns of 30 tokens overflow the context: the adapter restarts the
    request (with ``budget`` tokens of room), which goes on. The request's id."""
    rid, fence = fresh()
    before = len(t.adapter.restarts)
    await t.engine.submit_initial(rid, fence, Ctx(context))
    for n in range(turns):
        await t.engine.submit_update(rid, Gen(f"R{n}", turn(n), 30))
        got = await pieces(t, rid, 1)
        assert got[-1].label == f"R{n}" and got[-1].finished
    restarts = t.adapter.restarts[before:]
    assert restarts, "the context never filled"
    assert all(room == budget for _, room in restarts)
    assert t.engine.has_request(rid)
    await t.engine.abort([rid])
    return rid


async def check_full_context_without_restart_fails(t: Tiny[Any], context: str,
                                                   turn: Callable[[int], str],
                                                   turns: int) -> None:
    """An adapter that will not restart: the full context fails the request cleanly."""
    rid, fence = fresh()
    t.adapter.allow_restart = False
    try:
        await t.engine.submit_initial(rid, fence, Ctx(context))
        error: str | None = None
        for n in range(turns):
            await t.engine.submit_update(rid, Gen(f"F{n}", turn(n), 30))
            out: StageOutput | None = None
            while True:
                out = await t.router.next(rid)
                if out.error is not None or (out.result and out.result.payload.finished):
                    break
            if out.error is not None:
                error = out.error
                break
        assert error is not None and "context full" in error
        assert not t.engine.has_request(rid)
    finally:
        t.adapter.allow_restart = True


async def check_start_failure_fails_waiting_requests(engine: StageEngine) -> None:
    """``engine``'s model fails to start (``no_such_model``): the request waiting for
    it fails, ``run`` raises, and readiness says why."""
    rid, fence = fresh("broken")
    await engine.submit_initial(rid, fence, Ctx("x"))
    task = asyncio.create_task(engine.run())
    out = await asyncio.wait_for(anext(engine.outputs()), 30)
    assert out.error is not None and "no such model" in out.error
    with pytest.raises(OSError):
        await task
    with pytest.raises(RuntimeError):
        await engine.wait_ready()
    assert "failed to start" in engine.readiness() and "no such model" in engine.readiness()
