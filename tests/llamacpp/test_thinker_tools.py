"""The cascade's thinker calls tools on its default model (the bundled
Qwen2.5-Coder-1.5B GGUF on llama.cpp, built as the plugin builds it).

Meaning, not wording: a weather question becomes a ``get_weather`` call
whose arguments parse and validate and name the city; a joke stays words;
the tool's answer comes back into the reply. Few completions: each costs
seconds on a small CPU.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest
import pytest_asyncio
from llamacpp_helpers import Thinker, running_thinker

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import Tool, ToolChoice, ToolSet
from plugins.base import Context, HistoryItem
from plugins.cascade.payloads import Clause, ToolCall, UserTurn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.asyncio(loop_scope="module")]

WEATHER = Tool("get_weather", "Get the current weather in a city.", {
    "type": "object",
    "properties": {"location": {"type": "string", "description": "The city"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location", "unit"]})
TOOLS = ToolSet((WEATHER,))
# The same without a word on its parameters: without CALL_BIAS, the model
# described this call in words instead of making it.
TERSE = ToolSet((replace(WEATHER, parameters={**WEATHER.parameters, "properties": {
    "location": {"type": "string"}, "unit": WEATHER.parameters["properties"]["unit"]}}),))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def thinker() -> AsyncIterator[Thinker]:
    async with running_thinker(parallel=1) as thinker:
        yield thinker


@dataclass
class Reply:
    words: str
    calls: list[ToolCall]
    call_ms: float | None  # from the turn's submit to its first call


class Chat:
    def __init__(self, t: Thinker) -> None:
        self.t = t
        sid = f"tools-{uuid.uuid4().hex[:8]}"
        self.rid, self.fence = f"{sid}.e0.s1", Fence(sid, 0, 0, 0)

    async def open(self, context: Context) -> None:
        await self.t.engine.submit_initial(self.rid, self.fence, context)

    async def reply(self, payload: object) -> Reply:
        t0 = time.perf_counter()
        await self.t.engine.submit_update(self.rid, payload)
        words: list[str] = []
        calls: list[ToolCall] = []
        call_ms = None
        while True:
            out = await self.t.router.next(self.rid, 300)
            assert out.error is None and out.result is not None, out.error
            got = out.result.payload
            if isinstance(got, ToolCall):
                call_ms = call_ms or (time.perf_counter() - t0) * 1000
                calls.append(got)
                continue
            assert isinstance(got, Clause), got
            assert not calls or not got.text, "words after a call"
            words.append(got.text)
            if got.last:
                print(f"\nBOT: {''.join(words)!r} calls={calls} call_ms={call_ms}")
                return Reply("".join(words), calls, call_ms)


def valid_weather_arguments(arguments: str) -> dict[str, str]:
    args = json.loads(arguments)
    assert set(args) == {"location", "unit"}, args
    assert isinstance(args["location"], str) and args["unit"] in ("celsius", "fahrenheit")
    return args


async def test_a_weather_question_calls_the_tool_and_its_answer_is_used(thinker: Thinker) -> None:
    chat = Chat(thinker)
    await chat.open(Context(None, (), TERSE))
    asked = await chat.reply(UserTurn(1, "item_1", "What's the weather in Paris?", True))
    assert [c.name for c in asked.calls] == ["get_weather"], asked
    assert "paris" in valid_weather_arguments(asked.calls[0].arguments)["location"].lower()
    assert "tool_call" not in asked.words and "{" not in asked.words
    # the client runs the tool and asks for the reply
    output = HistoryItem("tool", json.dumps({"temperature_c": 17, "sky": "cloudy"}),
                         "function_call_output", call_id="call_1")
    await thinker.engine.submit_update(chat.rid, Context(None, (output,)))
    answer = await chat.reply(fx.StartResponse(chat.fence.with_turn(2), "resp_2", None))
    assert not answer.calls
    assert "17" in answer.words or "cloud" in answer.words.lower(), answer
    await thinker.engine.abort([chat.rid])


async def test_a_joke_is_words_unless_a_call_is_required(thinker: Thinker) -> None:
    chat = Chat(thinker)
    await chat.open(Context(None, (), TOOLS))
    joke = await chat.reply(UserTurn(1, "item_1", "Tell me a joke about cats.", True))
    assert not joke.calls and "cat" in joke.words.lower(), joke
    # tool_choice "required": the grammar makes even this a valid call
    forced = await chat.reply(fx.StartResponse(chat.fence.with_turn(2), "resp_2", None,
                                               replace(TOOLS, choice=ToolChoice("required"))))
    assert [c.name for c in forced.calls] == ["get_weather"] and not forced.words.strip()
    valid_weather_arguments(forced.calls[0].arguments)
    await thinker.engine.abort([chat.rid])



FLIGHT = Tool("lookup_flight", "Look up a flight's status by its number.", {
    "type": "object", "properties": {"number": {"type": "string"}}, "required": ["number"]})
TIMER = Tool("set_timer", "Start a countdown timer.", {
    "type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]})
# (question, tool, its output, words the answer must carry one of)
FOLLOW_UPS = [
    ("Is flight BA117 on time?", "lookup_flight", {"status": "delayed", "minutes_late": 45},
     ("delay", "45")),
    ("What's the weather in Oslo?", "get_weather", {"temperature_c": -3, "sky": "snow"},
     ("snow", "-3", "3 degrees", "minus")),
    ("Set a timer for ten minutes.", "set_timer", {"ok": True, "rings_at": "16:45"},
     ("16:45", "4:45", "set", "start")),
]


@pytest.mark.parametrize(("question", "tool", "result", "said"), FOLLOW_UPS)
async def test_under_tool_choice_none_the_reply_speaks_the_result(
        thinker: Thinker, question: str, tool: str, result: dict[str, object],
        said: tuple[str, ...]) -> None:
    # under "none" the follow-up cannot call again, and it answers the result, not
    # an instruction not to call ("Do not call a function now.")
    chat = Chat(thinker)
    tools = ToolSet((WEATHER, FLIGHT, TIMER))
    await chat.open(Context(None, (), tools))
    asked = await chat.reply(UserTurn(1, "item_1", question, True))
    assert [c.name for c in asked.calls] == [tool], asked
    output = HistoryItem("tool", json.dumps(result), "function_call_output", call_id="call_1")
    await thinker.engine.submit_update(chat.rid, Context(None, (output,)))
    answer = await chat.reply(fx.StartResponse(chat.fence.with_turn(2), "resp_2", None,
                                               replace(tools, choice=ToolChoice("none"))))
    assert not answer.calls
    assert any(word in answer.words.lower() for word in said), answer
    await thinker.engine.abort([chat.rid])


async def af22_answered(thinker: Thinker) -> tuple[Chat, Reply]:
    """A flight looked up, its result given back, and the reply to it."""
    chat = Chat(thinker)
    await chat.open(Context(None, (), ToolSet((WEATHER, FLIGHT, TIMER))))
    asked = await chat.reply(UserTurn(1, "item_1", "Look up flight AF 22, please.", True))
    assert [c.name for c in asked.calls] == ["lookup_flight"], asked
    result = {"flight_number": "AF22", "status": "delayed", "departure": "7:40 PM",
              "gate": "B12"}
    output = HistoryItem("tool", json.dumps(result), "function_call_output", call_id="call_1")
    await thinker.engine.submit_update(chat.rid, Context(None, (output,)))
    return chat, await chat.reply(fx.StartResponse(chat.fence.with_turn(2), "resp_2", None))


async def test_under_auto_the_reply_to_a_result_says_it(thinker: Thinker) -> None:
    # unbiased, this reply made the call just answered again (bench/README.md,
    # tool_quiz: "calls again after a result")
    chat, answer = await af22_answered(thinker)
    assert not answer.calls and "delay" in answer.words.lower(), answer
    await thinker.engine.abort([chat.rid])


@pytest.mark.xfail(strict=True, reason="after a spoken result the 1.5B answers the next "
                   "flight from it: 'The flight UA 902 is delayed, departing at 8:00 PM' "
                   "(an invented result; bench/README.md, tool_quiz, 2026-12-03 18:32)")
async def test_a_new_request_after_a_spoken_result_calls_again(thinker: Thinker) -> None:
    chat, _ = await af22_answered(thinker)
    try:
        again = await chat.reply(UserTurn(3, "item_3", "And flight UA 902?", True))
        assert [c.name for c in again.calls] == ["lookup_flight"], again
    finally:
        await thinker.engine.abort([chat.rid])
