"""``VllmEngine`` mechanics on a tiny random Llama (one engine for the module).

What the real ``AsyncLLM`` does with one resumable request per stage request:
chunks in order, outputs attributed to the right chunk, context-only chunks'
outputs dropped, abort (idempotent, prompt, R3: no re-add), failures of one
request, concurrent requests kept apart, a full context restarted, shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from echo_adapter import Ctx, EchoAdapter, Gen, Guess, Tiny, fresh, pieces
from engine_checks import (
    check_canned_output_waits,
    check_full_context_restarts,
    check_full_context_without_restart_fails,
    check_on_text_failure_fails_the_request,
    check_plan_failure_fails_only_its_request,
    check_start_failure_fails_waiting_requests,
    no_such_model,
)
from vllm_helpers import build_tiny_model, running

from duplex.fence import Fence
from engines.base import UnknownRequest
from engines.vllm import VllmEngine, make_async_llm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.asyncio(loop_scope="module")]

MAX_MODEL_LEN = 256


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiny(tiny_model: Path) -> AsyncIterator[Tiny]:
    adapter = EchoAdapter(restart_prefix="<|im_start|>restarted ")
    engine = VllmEngine(
        1, "tiny", adapter,
        make_async_llm(str(tiny_model), dtype="bfloat16", max_model_len=MAX_MODEL_LEN,
                       enforce_eager=True),
        sampling={"temperature": 0.0, "ignore_eos": True})
    async with running(engine) as router:
        yield Tiny(engine, adapter, router)


# -- tests ---------------------------------------------------------------------------


async def test_chunks_in_order_outputs_attributed_context_dropped(tiny: Tiny) -> None:
    assert tiny.engine.readiness() == ""
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx("<|im_start|>system\nhello<|im_end|>\n"))
    # submitted back to back: B and the context chunk queue behind A's generation
    await tiny.engine.submit_update(rid, Gen("A", "def main():", 12))
    await tiny.engine.submit_update(rid, Ctx(" more context"))
    await tiny.engine.submit_update(rid, Gen("B", " return", 5))
    got = await pieces(tiny, rid, 2)
    labels = [p.label for p in got]
    assert set(labels) == {"A", "B"}
    assert labels == sorted(labels), labels  # every A piece before any B piece
    assert [p.finished for p in got if p.label == "A"][-1]
    assert sum(p.finished for p in got) == 2
    await asyncio.sleep(0.2)
    assert tiny.router.pending(rid) == 0  # context chunks produced nothing
    assert tiny.engine.has_request(rid)
    # the adapter ran on the engine's own thread, never on this loop's thread
    assert all(name.endswith("-vllm") for name in tiny.adapter.threads), tiny.adapter.threads
    await tiny.engine.abort([rid])


async def test_one_request_holds_many_turns(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx("<|im_start|>system\nhi<|im_end|>\n"))
    for turn in range(4):
        await tiny.engine.submit_update(rid, Gen(f"T{turn}", f" turn {turn}", 6))
        got = await pieces(tiny, rid, 1)
        assert {p.label for p in got} == {f"T{turn}"}
    await tiny.engine.abort([rid])


async def test_guesses_are_ignored(tiny: Tiny) -> None:
    """vLLM runs no guesses: a speculative chunk adds nothing, says nothing."""
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx("<|im_start|>system\nhi<|im_end|>\n"))
    await tiny.engine.submit_update(rid, Guess(" a guess", 6))
    await tiny.engine.submit_update(rid, Gen("T", " turn", 6))
    got = await pieces(tiny, rid, 1)
    assert {p.label for p in got} == {"T"}
    await tiny.engine.abort([rid])


async def test_canned_output_waits_for_earlier_generation(tiny: Tiny) -> None:
    await check_canned_output_waits(tiny, "import os")


async def test_abort_stops_outputs_and_forgets_the_request(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Gen("long", "class Foo:", 200))
    first = await tiny.router.next(rid)
    assert first.result is not None and not first.result.payload.finished
    t0 = time.perf_counter()
    await tiny.engine.abort([rid])
    abort_s = time.perf_counter() - t0
    assert not tiny.engine.has_request(rid)
    await asyncio.sleep(0.5)
    # whatever was queued before abort returned may be there; nothing after it
    late = [t for t in tiny.router.arrivals[rid] if t > t0]
    assert late == [], f"{len(late)} outputs after abort"
    with pytest.raises(UnknownRequest):
        await tiny.engine.submit_update(rid, Gen("again", " x", 2))
    await tiny.engine.abort([rid])  # idempotent
    await tiny.engine.abort(["never-existed"])
    assert not tiny.engine.has_request(rid)
    assert abort_s < 0.05
    state = next(s for s in tiny.adapter.states if s.fence == fence)
    for _ in range(50):
        if state.closed:
            break
        await asyncio.sleep(0.02)
    assert state.closed


async def test_resubmit_same_id_after_abort_is_a_new_request(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Gen("old", "x = 1", 200))
    await tiny.router.next(rid)
    await tiny.engine.abort([rid])
    await asyncio.sleep(0.3)
    while tiny.router.pending(rid):
        await tiny.router.next(rid)
    await tiny.engine.submit_initial(rid, fence, Gen("new", "y = 2", 4))
    got = await pieces(tiny, rid, 1)
    assert {p.label for p in got} == {"new"}
    await tiny.engine.abort([rid])


async def test_concurrent_requests_do_not_mix(tiny: Tiny) -> None:
    rids = [fresh("c") for _ in range(4)]
    for i, (rid, fence) in enumerate(rids):
        await tiny.engine.submit_initial(rid, fence, Ctx(f"<|im_start|>user\nsession {i}"))
    for i, (rid, _) in enumerate(rids):
        for turn in range(2):
            await tiny.engine.submit_update(rid, Gen(f"{i}-{turn}", f" say {i}", 8 + i))
    results = await asyncio.gather(*(pieces(tiny, rid, 2) for rid, _ in rids))
    for i, got in enumerate(results):
        assert [p.label for p in got if p.finished] == [f"{i}-0", f"{i}-1"]
        assert {p.label.split("-")[0] for p in got} == {str(i)}
    await tiny.engine.abort([rid for rid, _ in rids])


async def test_batched_identical_requests_give_identical_text(tiny: Tiny) -> None:
    async def run(rid: str, fence: Fence) -> str:
        await tiny.engine.submit_initial(rid, fence, Gen("x", "async def handler(", 16))
        got = await pieces(tiny, rid, 1)
        await tiny.engine.abort([rid])
        return "".join(p.delta for p in got)

    alone = await run(*fresh("a"))
    together = await asyncio.gather(*(run(*fresh("b")) for _ in range(3)))
    # identical requests batched together come out identical; against the solo
    # run only the start is compared (batched bf16 may round differently)
    assert len(set(together)) == 1
    assert together[0][:4] == alone[:4]


async def test_plan_failure_fails_only_that_request(tiny: Tiny) -> None:
    await check_plan_failure_fails_only_its_request(tiny, "x", " fine")


async def test_on_text_failure_fails_the_request(tiny: Tiny) -> None:
    await check_on_text_failure_fails_the_request(tiny)


async def test_full_context_restarts_the_request(tiny: Tiny) -> None:
    # ≈ 12 × (≈5 prompt + 30 generated) tokens: more than 256
    await check_full_context_restarts(tiny, "<|im_start|>system\nlong chat<|im_end|>\n",
                                      lambda n: f" turn {n}", turns=12,
                                      budget=MAX_MODEL_LEN - 30)


async def test_full_context_without_restart_fails_cleanly(tiny: Tiny) -> None:
    await check_full_context_without_restart_fails(
        tiny, "<|im_start|>system\nx<|im_end|>\n", lambda n: f" turn {n}", turns=20)


async def test_shutdown_stops_thread_and_engine_core(tiny_model: Path) -> None:
    """Cancelling run() with a generation in flight aborts it, shuts the AsyncLLM
    down, ends the engine's thread and its engine-core process."""
    import threading

    engine = VllmEngine(1, "stopper", EchoAdapter(),
                        make_async_llm(str(tiny_model), dtype="bfloat16",
                                       max_model_len=MAX_MODEL_LEN, enforce_eager=True),
                        sampling={"temperature": 0.0, "ignore_eos": True})
    before = _engine_cores()
    assert engine.readiness() == "stage stopper: not started"
    async with running(engine) as router:
        assert engine.readiness() == ""
        rid, fence = fresh("stop")
        await engine.submit_initial(rid, fence, Gen("S", "x", 200))  # still running at exit
        first = await router.next(rid)
        assert first.error is None
        new = _engine_cores() - before
        assert new, "no engine-core process"
    assert not any(t.name == "stage1-stopper-vllm" for t in threading.enumerate())
    assert engine.readiness() == "stage stopper stopped"
    for _ in range(150):
        if not _alive(new):
            break
        await asyncio.sleep(0.2)
    assert not _alive(new)


def _engine_cores() -> set[int]:
    """This process's vLLM engine-core children (not multiprocessing's resource
    tracker, which lives as long as this process)."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)
            if "EngineCore" in p.name()}


def _alive(pids: set[int]) -> list[int]:
    import psutil

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [p for p in pids if running(p)]


async def test_start_failure_fails_waiting_requests() -> None:
    await check_start_failure_fails_waiting_requests(
        VllmEngine(1, "broken", EchoAdapter(), no_such_model))
