"""The cascade's thinker on its default model and engine (the bundled GGUF on
llama.cpp, assembled and verified by ``plugins.cascade.bundled``), built as the
plugin builds it (``LlmChoice.stage`` → ``build_engine``), with the real
``ThinkerAdapter``.

Meaning checks, not wording: the issue's questions are answered right, roles
stay straight (the user's name is the user's), instructions that arrive
mid-conversation apply from the next reply, the conversation survives across
turns in one request and, rebuilt from history, in a new one (a barge-in's
new epoch), and a full context is compacted without losing the recent turns.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from cascade_agent import words
from engine_router import reply_text
from llamacpp_helpers import Thinker, default_stage, running, running_thinker

from duplex.fence import Fence
from engines import build_engine
from engines.llamacpp import LlamaCppEngine
from plugins.base import Context, HistoryItem
from plugins.cascade.payloads import UserTurn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def thinker() -> AsyncIterator[Thinker]:
    async with running_thinker() as thinker:
        yield thinker


class Chat:
    """One thinker request (a session epoch) and its turns."""

    def __init__(self, t: Thinker, context: Context | None = None) -> None:
        self.t = t
        sid = f"chat-{uuid.uuid4().hex[:8]}"
        self.rid = f"{sid}.e0.s1"
        self.fence = Fence(sid, 0, 0, 0)
        self.context = context or Context(None)
        self.turn = 0

    async def __aenter__(self) -> Chat:
        await self.t.engine.submit_initial(self.rid, self.fence, self.context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.t.engine.abort([self.rid])

    async def say(self, text: str) -> str:
        self.turn += 1
        await self.t.engine.submit_update(self.rid, UserTurn(self.turn, f"item_{self.turn}",
                                                             text, True))
        reply = reply_text(await self.t.router.reply(self.rid)).strip()
        print(f"\nUSER: {text}\nBOT:  {reply}")
        return reply

    async def instruct(self, instructions: str) -> None:
        await self.t.engine.submit_update(self.rid, Context(instructions))


async def test_the_issues_questions_are_answered_right(thinker: Thinker) -> None:
    async with Chat(thinker) as chat:
        assert "paris" in words(await chat.say("What is the capital of France?"))
        assert words(await chat.say("How many legs does a spider have?")) & {"eight", "8"}
    async with Chat(thinker) as chat:
        await chat.say("My name is Anna.")
        reply = await chat.say("What is my name?")
        assert "anna" in words(reply), reply
        # the name is the user's: the assistant does not take it as its own
        assert not re.search(r"\b(i am|i'm|my name is) anna\b", reply.lower()), reply


async def test_roles_stay_straight_for_the_users_things(thinker: Thinker) -> None:
    async with Chat(thinker) as chat:
        await chat.say("I am Tom and I have a dog called Rex.")
        reply = await chat.say("What is my dog's name?")
        assert "rex" in words(reply), reply
        reply = await chat.say("And what is my name?")
        assert "tom" in words(reply) and not re.search(r"\b(i am|i'm|mine is) tom\b",
                                                       reply.lower()), reply


async def test_instructions_apply_from_the_next_reply(thinker: Thinker) -> None:
    async with Chat(thinker) as chat:
        before = await chat.say("What is the capital of Italy?")
        assert "rome" in words(before) and "out" not in words(before)
        await chat.instruct("End every reply with the words: over and out.")
        after = await chat.say("What color is the sky on a clear day?")
        assert "blue" in words(after) and after.lower().rstrip(" .!").endswith("over and out"), \
            after


async def test_context_survives_turns_and_a_new_epoch(thinker: Thinker) -> None:
    async with Chat(thinker) as chat:
        await chat.say("Remember this. The secret word is pineapple.")
        await chat.say("What is two plus two?")
        assert "pineapple" in words(await chat.say("What is the secret word?"))
    # a barge-in starts a new epoch: its request is rebuilt from the honest history
    history = (HistoryItem("user", "Remember this. My favourite city is Lisbon."),
               HistoryItem("assistant", "Got it, Lisbon."))
    async with Chat(thinker, Context(None, history)) as chat:
        assert "lisbon" in words(await chat.say("Which city did I say is my favourite?"))


async def test_a_full_context_keeps_the_recent_turns() -> None:
    engine = build_engine(1, default_stage(n_ctx=256, parallel=1))
    assert isinstance(engine, LlamaCppEngine)
    async with running(engine) as router:
        async with Chat(Thinker(engine, router)) as chat:
            for n in range(8):  # ≈8 × 25 tokens + the system prompt: more than 256
                await chat.say(f"Here is a fact: box number {n} is painted green. Say okay.")
            await chat.say("Now remember: the last box is painted purple.")
            reply = await chat.say("What colour is the last box?")
            assert "purple" in words(reply), reply
        sizes = [p.usage.prompt_tokens for p in engine.prefills]
        assert any(b < a for a, b in itertools.pairwise(sizes)), sizes  # it was compacted
        assert max(sizes) <= 256
