"""The cascade's thinker for a model server (``plugins.cascade.chat_thinker``),
sans-I/O: payloads planned as OpenAI chat messages, and a streamed reply made
into clauses and checked calls."""

from __future__ import annotations

import json

import pytest

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import Tool, ToolChoice, ToolSet
from engines.stages import ChatChunk, ChatReply, ChatToolCall
from plugins.base import Context, HistoryItem, ReplyStep
from plugins.cascade.call_check import InvalidCall
from plugins.cascade.chat_thinker import ChatState, ChatThinker
from plugins.cascade.payloads import Clause, Draft, ToolCall, UserTurn
from plugins.cascade.thinker import DEFAULT_INSTRUCTIONS, NOT_HEARD

WEATHER = Tool("get_weather", "The weather.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
TIME = Tool("get_time", "The time.", {"type": "object", "properties": {}})
FENCE = Fence("s", 0, 0, 0)


def opened(context: Context) -> tuple[ChatThinker, ChatState, ChatChunk]:
    thinker = ChatThinker()
    state = thinker.open(FENCE)
    chunk = thinker.plan(state, context)
    assert chunk is not None and not chunk.generate
    return thinker, state, chunk


def payloads(thinker: ChatThinker, state: ChatState, chunk: ChatChunk,
             reply: ChatReply) -> tuple[list[object], ChatReply]:
    results = []
    for word in reply.text.split(" "):
        results += thinker.on_text(state, chunk, word + " ")
    end, kept = thinker.on_end(state, chunk, reply)  # what the talker gets: no steps
    return [r.payload for r in [*results, *end] if not isinstance(r.payload, ReplyStep)], kept


def test_the_first_context_is_the_system_message_and_the_history() -> None:
    history = (HistoryItem("user", "Hi"), HistoryItem("assistant", "Hello."),
               HistoryItem("assistant", "", "function_call", "get_time", "call_1", ""),
               HistoryItem("tool", "noon", "function_call_output", call_id="call_1"),
               HistoryItem("user", "   "), HistoryItem("developer", "Be kind."))
    _, state, chunk = opened(Context(None, history, ToolSet((TIME,))))
    assert list(chunk.messages) == [
        {"role": "system", "content": DEFAULT_INSTRUCTIONS},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
        {"role": "user", "content": "Be kind."}]
    assert state.tools.tools == (TIME,)


def test_a_call_with_no_words_before_it_is_an_assistant_message_of_its_own() -> None:
    call = HistoryItem("assistant", "", "function_call", "get_time", "call_9", '{"a": 1}')
    _, _, chunk = opened(Context("Be brief.", (HistoryItem("user", "Hi"), call), None))
    assert chunk.messages[0] == {"role": "system", "content": "Be brief."}
    assert chunk.messages[2] == {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_9", "type": "function",
        "function": {"name": "get_time", "arguments": '{"a": 1}'}}]}


def test_turns_append_messages_and_a_reply_offers_the_tools() -> None:
    thinker, state, _ = opened(Context(None, (), ToolSet((WEATHER, TIME),
                                                         ToolChoice("function", "get_time"))))
    quiet = thinker.plan(state, UserTurn(1, "i1", " Hello ", False))
    assert quiet == ChatChunk(({"role": "user", "content": "Hello"},))
    assert thinker.plan(state, UserTurn(1, "i1", "  ", False)) is None
    assert thinker.plan(state, Draft("What is")) is None  # no guesses on a shared server
    later = thinker.plan(state, Context("Now be formal.", (), ToolSet((WEATHER,))))
    assert later is not None and later.messages == ({"role": "system",
                                                     "content": "Now be formal."},)
    ask = thinker.plan(state, UserTurn(2, "i2", "Weather?", True))
    assert ask is not None and ask.generate and ask.messages == (
        {"role": "user", "content": "Weather?"},)
    assert [t["function"]["name"] for t in ask.tools] == ["get_weather"]
    assert ask.tool_choice == "auto" and ask.max_tokens >= thinker.max_reply_tokens


def test_nothing_heard_is_answered_with_the_fixed_line_without_the_model() -> None:
    thinker, state, _ = opened(Context(None))
    chunk = thinker.plan(state, UserTurn(1, "i1", "", True))
    assert chunk is not None and not chunk.generate
    assert chunk.messages == ({"role": "assistant", "content": NOT_HEARD},)
    assert [r.payload for r in chunk.emit] == [Clause(1, NOT_HEARD, last=True)]


def test_a_response_brings_its_instructions_and_its_own_tools() -> None:
    thinker, state, _ = opened(Context(None))
    chunk = thinker.plan(state, fx.StartResponse(
        FENCE.with_turn(3), "r", " Shout. ", ToolSet((WEATHER,), ToolChoice("required"))))
    assert chunk is not None and chunk.generate
    assert chunk.messages == ({"role": "system", "content": "Shout."},)
    assert chunk.tool_choice == "required"
    bare = thinker.plan(state, fx.StartResponse(FENCE.with_turn(4), "r", None))
    assert bare is not None and bare.messages == () and bare.tools == ()
    assert bare.tool_choice is None
    forced = thinker.plan(state, fx.StartResponse(
        FENCE.with_turn(5), "r", None, ToolSet((WEATHER,), ToolChoice("function",
                                                                      "get_weather"))))
    assert forced is not None
    assert forced.tool_choice == {"type": "function", "function": {"name": "get_weather"}}


def test_an_out_of_band_response_is_detached_with_its_own_prompt() -> None:
    thinker, state, _ = opened(Context("Session rules.", (), None))
    given = ({"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Summarise."}]},)
    chunk = thinker.plan(state, fx.StartResponse(FENCE, "r", None, None, given))
    assert chunk is not None and chunk.detached and chunk.generate
    assert chunk.messages == ({"role": "system", "content": DEFAULT_INSTRUCTIONS},
                              {"role": "user", "content": "Summarise."})


def test_a_reply_streams_clauses_and_its_calls_come_after_its_words() -> None:
    thinker, state, _ = opened(Context(None, (), ToolSet((WEATHER,))))
    chunk = thinker.plan(state, UserTurn(1, "i1", "Weather in Oslo?", True))
    assert chunk is not None
    call = ChatToolCall("call_x", "get_weather", '{"city": "Oslo"}')
    got, kept = payloads(thinker, state, chunk, ChatReply("Let me check.", (call,), "tool_calls"))
    assert got == [Clause(1, "Let me check.", last=False),
                   ToolCall(1, "get_weather", '{"city": "Oslo"}'), Clause(1, "", last=True)]
    assert kept == ChatReply("Let me check.", (call,), "tool_calls")
    # the session's id for the call is matched to the server's, in order
    output = HistoryItem("tool", "snow", "function_call_output", call_id="call_s")
    answer = thinker.plan(state, Context(None, (output,), None))
    assert answer is not None
    assert answer.messages == ({"role": "tool", "tool_call_id": "call_x", "content": "snow"},)
    again = thinker.plan(state, Context(None, (output,), None))
    assert again is not None and again.messages[0]["tool_call_id"] == "call_x"


def test_a_call_written_in_words_is_a_call_and_not_spoken() -> None:
    thinker, state, _ = opened(Context(None, (), ToolSet((WEATHER,))))
    chunk = thinker.plan(state, UserTurn(7, "i1", "Weather?", True))
    assert chunk is not None
    text = 'Sure. {"name": "get_weather", "arguments": {"city": "Rome"}}'
    got, kept = payloads(thinker, state, chunk, ChatReply(text, (), "stop"))
    calls = [p for p in got if isinstance(p, ToolCall)]
    assert calls == [ToolCall(7, "get_weather", json.dumps({"city": "Rome"}))]
    assert "".join(p.text for p in got if isinstance(p, Clause)).strip() == "Sure."
    assert kept.text.strip() == "Sure." and kept.calls[0].call_id == "call_7_0"


def test_a_reply_without_calls_ends_with_its_last_words() -> None:
    thinker, state, _ = opened(Context(None))
    chunk = thinker.plan(state, UserTurn(1, "i1", "Hi", True))
    assert chunk is not None
    got, kept = payloads(thinker, state, chunk, ChatReply("Hello there", (), "stop"))
    assert "".join(p.text for p in got if isinstance(p, Clause)).strip() == "Hello there"
    assert got[-1] == Clause(1, got[-1].text, last=True) and kept.text == "Hello there"
    thinker.close(state)
    assert state.reply is None


@pytest.mark.parametrize(("call", "why"), [
    (ChatToolCall("c", "get_time", "{}"), r"may not call \(it may call get_weather\)"),
    (ChatToolCall("c", "get_weather", "[1]"), "not an object"),
    (ChatToolCall("c", "get_weather", '{"town": "x"}'), "required 'city'"),
])
def test_a_call_the_reply_may_not_make_fails_it(call: ChatToolCall, why: str) -> None:
    thinker, state, _ = opened(Context(None, (), ToolSet((WEATHER,))))
    chunk = thinker.plan(state, UserTurn(1, "i1", "Weather?", True))
    assert chunk is not None
    with pytest.raises(InvalidCall, match=why):
        thinker.on_end(state, chunk, ChatReply("", (call,), "tool_calls"))


def test_under_none_a_call_is_dropped_and_the_reply_is_its_words() -> None:
    thinker, state, _ = opened(Context(None, (), ToolSet((WEATHER,), ToolChoice("none"))))
    chunk = thinker.plan(state, UserTurn(1, "i1", "Weather?", True))
    assert chunk is not None and chunk.tool_choice == "none"
    call = ChatToolCall("c", "get_weather", "{}")
    got, kept = payloads(thinker, state, chunk, ChatReply("Sunny", (call,), "tool_calls"))
    assert not [p for p in got if isinstance(p, ToolCall)] and kept.calls == ()
    assert got[-1] == Clause(1, got[-1].text, last=True)


def test_an_unknown_payload_is_refused() -> None:
    thinker, state, _ = opened(Context(None))
    with pytest.raises(TypeError, match="cannot take int"):
        thinker.plan(state, 7)
