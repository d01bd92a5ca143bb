"""Out-of-band replies on the default thinker (the bundled Qwen2.5-Coder-1.5B
GGUF on llama.cpp): a ``StartResponse`` with ``input`` is a detached chunk,
answered from its items alone, and the conversation's next turn neither sees
it nor pays to prefill the conversation again (``Usage.cached_tokens``).

The last test prints what an out-of-band reply in between costs the next turn
(docs/plugins.md quotes it); nothing here asserts a time."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from llamacpp_helpers import Thinker, prefills_of, running_thinker

from duplex import effects as fx
from duplex.fence import Fence
from plugins.base import Context, HistoryItem
from plugins.cascade.payloads import Clause, UserTurn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200),
              pytest.mark.asyncio(loop_scope="module")]

# a conversation long enough that a detached prompt shares less than half of it
HISTORY = tuple(item for i, fact in enumerate((
    "the Moon is about 384,000 kilometres from the Earth",
    "the Moon's day lasts about 29 and a half Earth days",
    "the Moon has no air, so its sky is black even by day",
    "twelve people have walked on the Moon",
    "the Moon drifts away from the Earth by about 4 centimetres a year",
    "the Moon always shows the Earth the same face")) for item in (
        HistoryItem("user", f"Tell me fact {i + 1} about the Moon."),
        HistoryItem("assistant", f"Here it is: {fact}.")))
BANANA = {"type": "message", "role": "user",
          "content": [{"type": "input_text", "text": "Say the word banana."}]}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def thinker() -> AsyncIterator[Thinker]:
    async with running_thinker() as thinker:
        yield thinker


class Chat:
    def __init__(self, t: Thinker) -> None:
        self.t = t
        sid = f"oob-{uuid.uuid4().hex[:8]}"
        self.rid, self.fence = f"{sid}.e0.s1", Fence(sid, 0, 0, 0)
        self.turn = 0

    async def open(self, *items: HistoryItem) -> None:
        # instructions of its own: no other chat's cache serves this one
        instructions = f"Be brief. This is conversation {self.rid[4:12]}."
        await self.t.engine.submit_initial(self.rid, self.fence, Context(instructions, items))

    async def say(self, text: str) -> tuple[str, float]:
        self.turn += 1
        return await self._reply(UserTurn(self.turn, f"item_{self.turn}", text, True))

    async def out_of_band(self, *given: dict[str, object]) -> str:
        self.turn += 1
        fence = self.fence.with_turn(self.turn)
        words, _ = await self._reply(fx.StartResponse(fence, f"resp_{self.turn}", None,
                                                      None, given))
        return words

    async def _reply(self, payload: object) -> tuple[str, float]:
        """The reply's words, and the ms to its first clause."""
        t0 = time.perf_counter()
        await self.t.engine.submit_update(self.rid, payload)
        words: list[str] = []
        first_ms = 0.0
        while True:
            out = await self.t.router.next(self.rid, 600)
            assert out.error is None and out.result is not None, out.error
            clause = out.result.payload
            assert isinstance(clause, Clause), clause
            first_ms = first_ms or (time.perf_counter() - t0) * 1000
            words.append(clause.text)
            if clause.last:
                return "".join(words), first_ms

    async def close(self) -> None:
        await self.t.engine.abort([self.rid])


async def test_the_next_turn_neither_sees_the_reply_nor_prefills_again(thinker: Thinker) -> None:
    chat = Chat(thinker)
    await chat.open(*HISTORY)
    await chat.say("Which fact did you like best? One sentence.")
    context = prefills_of(thinker.engine, chat.rid)[-1].usage
    banana = await chat.out_of_band(BANANA)
    assert "banana" in banana.lower(), banana
    [detached] = [p for p in prefills_of(thinker.engine, chat.rid) if p.detached]
    assert detached.usage.prompt_tokens < context.prompt_tokens // 2  # its items alone
    words, _ = await chat.say("Repeat the last word you said, and nothing else.")
    assert "banana" not in words.lower(), words
    after = prefills_of(thinker.engine, chat.rid)[-1].usage
    # the whole conversation came from the cache (llama.cpp re-evaluates at most a token)
    assert after.cached_tokens >= context.prompt_tokens + context.completion_tokens - 1, after
    await chat.close()


async def test_what_an_out_of_band_reply_costs_the_next_turn(thinker: Thinker) -> None:
    for history, label in ((HISTORY, "long"), ((), "short")):
        costs = []
        for between in (False, True):
            chat = Chat(thinker)
            await chat.open(*history)
            await chat.say("My name is Ada. Say hello.")
            if between:
                await chat.out_of_band(BANANA)
            _, first_ms = await chat.say("What is my name?")
            usage = prefills_of(thinker.engine, chat.rid)[-1].usage
            costs.append(f"{'with' if between else 'without'} OOB: first clause "
                         f"{first_ms:.0f} ms, prompt {usage.prompt_tokens} tokens, "
                         f"{usage.prompt_tokens - usage.cached_tokens} prefilled")
            await chat.close()
        print(f"\n{label} conversation: " + "; ".join(costs))
