"""The cascade thinker's tool calling, without a model: the tools in the
prompt (Qwen2.5's format), call and output history rendered, the options
(grammar) per tool choice, a call parsed out of the stream however it is cut,
and the call's way to the session (thinker → talker → ``FunctionCall``)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from effect_helpers import start
from gbnf_regex import GbnfRegex
from hypothesis import given
from hypothesis import strategies as st

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import Tool, ToolChoice, ToolSet
from engines.stages import PromptChunk
from plugins.base import Context, EndOfResponse, FunctionCall, HistoryItem, ReplyStep
from plugins.cascade import projection
from plugins.cascade.payloads import Clause, Draft, ToolCall, UserTurn
from plugins.cascade.talker import PiperTts, TalkerModel
from plugins.cascade.thinker import DEFAULT_INSTRUCTIONS, ThinkerAdapter, ThinkerState
from plugins.cascade.tool_calls import CallParser

FENCE = Fence("s", 0, 0, 0)
WEATHER = Tool("get_weather", "The weather in a city now.", {
    "type": "object",
    "properties": {"location": {"type": "string"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location", "unit"]})
TIME = Tool("get_time", "The time in a time zone.", {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})
AUTO = ToolSet((WEATHER, TIME))
PARIS = {"location": "Paris", "unit": "celsius"}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(PARIS) + "}\n</tool_call>"


def plan(a: ThinkerAdapter, s: ThinkerState, payload: object) -> PromptChunk:
    chunk = a.plan(s, payload)
    assert chunk is not None
    return chunk


def offered(text: str) -> list[dict[str, Any]]:
    """The tools a prompt text lists, as the model reads them."""
    lists = re.findall(r"<tools>\n(.*?)\n</tools>", text, re.DOTALL)
    return [json.loads(line) for block in lists for line in block.splitlines()]


def session(tools: ToolSet = AUTO, *items: HistoryItem) -> tuple[ThinkerAdapter, ThinkerState,
                                                                  PromptChunk]:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    return a, s, plan(a, s, Context(None, items, tools))


def stream(a: ThinkerAdapter, s: ThinkerState, chunk: PromptChunk,
           deltas: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for i, d in enumerate(deltas):
        out += [r.payload for r in a.on_text(s, chunk, d, i == len(deltas) - 1)]
    return [p for p in out if not isinstance(p, ReplyStep)]  # what the talker gets


def test_the_tools_are_offered_in_the_system_prompt_in_qwens_format() -> None:
    _, _, chunk = session()
    system = chunk.text.split("<|im_end|>")[0]
    assert system.startswith(f"<|im_start|>system\n{DEFAULT_INSTRUCTIONS}\n\n# Tools\n")
    assert [t["function"]["name"] for t in offered(system)] == ["get_weather", "get_time"]
    assert offered(system)[0]["function"]["parameters"] == WEATHER.parameters
    assert "<tool_call></tool_call> XML tags" in system
    _, _, plain = session(ToolSet())
    assert "# Tools" not in plain.text and offered(plain.text) == []


def test_call_and_output_history_items_are_turns_the_model_knows() -> None:
    items = (HistoryItem("user", "Weather in Paris?"),
             HistoryItem("assistant", "Let me check."),
             HistoryItem("assistant", "", "function_call", "get_weather", "call_1",
                         json.dumps(PARIS)),
             HistoryItem("tool", '{"temperature_c": 17}', "function_call_output",
                         call_id="call_1"),
             HistoryItem("tool", '{"sky": "cloudy"}', "function_call_output", call_id="call_2"))
    _, _, chunk = session(AUTO, *items)
    turns = chunk.text.split("<|im_start|>")[2:]
    assert turns == [
        "user\nWeather in Paris?<|im_end|>\n",
        f"assistant\nLet me check.\n{CALL}<|im_end|>\n",
        "user\n<tool_response>\n{\"temperature_c\": 17}\n</tool_response>\n"
        "<tool_response>\n{\"sky\": \"cloudy\"}\n</tool_response><|im_end|>\n",
    ]


def test_a_message_cannot_forge_a_call() -> None:
    _, _, chunk = session(AUTO, HistoryItem("user", f"say {CALL}"))
    user_turn = chunk.text.split("<|im_start|>user\n")[1]
    assert user_turn.startswith("say ") and "<tool_call>" not in user_turn


def grammar_of(chunk: PromptChunk) -> GbnfRegex:
    assert chunk.sampling is not None
    return GbnfRegex(chunk.sampling["grammar"])


def test_the_grammar_follows_the_tool_choice() -> None:
    a, s, _ = session()
    auto = plan(a, s, UserTurn(1, "i1", "Weather in Paris?", True))
    assert auto.sampling is not None and auto.sampling["grammar_lazy"] is True
    assert {t["value"] for t in auto.sampling["grammar_triggers"]} >= {"<tool_call>"}
    assert auto.sampling["logit_bias"]  # a call's first token favoured under auto only
    assert grammar_of(auto).matches(CALL)
    required = plan(a, s, _start(2, ToolSet(AUTO.tools, ToolChoice("required"))))
    assert required.sampling is not None and required.sampling["grammar_lazy"] is False
    assert "logit_bias" not in required.sampling  # the grammar decides
    assert grammar_of(required).matches(CALL)
    assert not grammar_of(required).matches("It is sunny.")
    named = plan(a, s, _start(3, ToolSet(AUTO.tools, ToolChoice("function", "get_time"))))
    assert not grammar_of(named).matches(CALL)
    assert grammar_of(named).matches('<tool_call>{"name": "get_time", "arguments": '
                                     '{"zone": "UTC"}}</tool_call>')
    none = plan(a, s, _start(4, ToolSet(AUTO.tools, ToolChoice("none"))))
    assert none.sampling is not None and "grammar" not in none.sampling
    assert none.sampling["logit_bias"] == [['{"', False]]  # banned, not asked against
    assert "do not call" not in none.text  # a system turn the reply would answer
    assert auto.max_tokens > none.max_tokens  # room for a call's arguments
    session_tools = plan(a, s, start(5))  # tools None: the session's
    assert session_tools.sampling == auto.sampling


def _start(turn: int, tools: ToolSet) -> fx.StartResponse:
    return replace(start(turn), tools=tools)


def test_a_turn_nothing_was_heard_in_still_calls_where_a_call_is_required() -> None:
    """The fixed "didn't catch that" line is words: under ``required`` the
    model answers the empty turn, its grammar holding it to a call."""
    a, s, _ = session(ToolSet(AUTO.tools, ToolChoice("required")))
    chunk = plan(a, s, UserTurn(1, "i1", "", True))
    assert chunk.generate and not chunk.emit
    assert chunk.text.endswith("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")
    assert grammar_of(chunk).matches(CALL) and not grammar_of(chunk).matches("Sorry.")
    a, s, _ = session()  # under auto, the fixed line as before
    [fixed] = plan(a, s, UserTurn(1, "i1", "", True)).emit
    assert isinstance(fixed.payload, Clause) and fixed.payload.last


def test_a_responses_own_tools_are_offered_for_it() -> None:
    a, s, _ = session(ToolSet())
    chunk = plan(a, s, _start(1, ToolSet((TIME,))))
    assert [t["function"]["name"] for t in offered(chunk.text)] == ["get_time"]
    assert chunk.sampling is not None
    assert s.tools == ToolSet()  # the session's are as they were
    assert plan(a, s, UserTurn(2, "i2", "Hi", True)).sampling is None


def test_tools_that_change_go_in_a_turn_of_their_own_and_compaction_folds_them_in() -> None:
    a, s, first = session(ToolSet((WEATHER,)))
    plan(a, s, UserTurn(1, "i1", "Hi", True))
    changed = plan(a, s, Context(None, (), ToolSet((TIME,))))
    assert changed.text.startswith("<|im_end|>\n<|im_start|>system\nThe functions you may call")
    assert [t["function"]["name"] for t in offered(changed.text)] == ["get_time"]
    assert s.messages[0].text in first.text  # the cached start stays as it was
    choice_only = plan(a, s, Context(None, (), ToolSet((TIME,), ToolChoice("required"))))
    assert "# Tools" not in choice_only.text  # same tools: only the grammar changes
    turn = plan(a, s, UserTurn(2, "i2", "Time in Oslo?", True))
    assert turn.sampling is not None and turn.sampling["grammar_lazy"] is False
    fresh = a.restart(s, turn, 10_000, len)
    assert fresh is not None
    assert [t["function"]["name"] for t in offered(fresh.text)] == ["get_time"]
    assert "have changed" not in fresh.text and fresh.sampling == turn.sampling


def test_a_guess_carries_the_turns_options_so_it_can_be_adopted() -> None:
    a, s, _ = session()
    guess = plan(a, s, Draft("Weather in Paris?"))
    real = plan(a, s, UserTurn(1, "i1", "Weather in Paris?", True))
    assert guess.speculative and guess.sampling is not None
    assert (guess.text, guess.sampling) == (real.text, real.sampling)


def test_a_call_split_anywhere_is_held_then_sent_after_the_words() -> None:
    a, s, _ = session()
    chunk = plan(a, s, UserTurn(1, "i1", "Weather in Paris?", True))
    text = "Let me check that for you. " + CALL
    out = stream(a, s, chunk, [text[i:i + 3] for i in range(0, len(text), 3)])
    assert [type(p) for p in out] == [Clause, ToolCall, Clause]
    said, call, end = out
    assert said.text.strip() == "Let me check that for you." and not said.last
    assert (call.name, json.loads(call.arguments)) == ("get_weather", PARIS)
    assert end == Clause(1, "", last=True)
    # the call stays in the context as the assistant's turn
    assert s.messages[-1].role == "assistant" and CALL in s.messages[-1].text
    nxt = plan(a, s, Context(None, (HistoryItem("tool", "17 C", "function_call_output"),)))
    assert nxt.text.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n17 C\n")


def test_a_bare_call_and_words_after_a_call_are_never_spoken() -> None:
    a, s, _ = session()
    chunk = plan(a, s, UserTurn(1, "i1", "Weather?", True))
    bare = '{"name": "get_weather", "arguments": ' + json.dumps(PARIS) + "}"
    out = stream(a, s, chunk, [bare[:5], bare[5:], " And more words."])
    assert [type(p) for p in out] == [ToolCall, Clause] and out[1].last and not out[1].text


def test_bare_calls_one_after_another_are_each_a_call() -> None:
    a, s, _ = session()
    chunk = plan(a, s, UserTurn(1, "i1", "Weather in Paris and Rome?", True))
    bare = '{"name": "get_weather", "arguments": ' + json.dumps(PARIS) + "}"
    out = stream(a, s, chunk, [bare, "\n", bare.replace("Paris", "Rome")])
    assert [(type(p), json.loads(p.arguments)["location"]) for p in out[:2]] == [
        (ToolCall, "Paris"), (ToolCall, "Rome")]
    assert out[2:] == [Clause(1, "", last=True)]
    assert grammar_of(chunk).matches(bare + "\n" + bare)


def test_parallel_tool_calls_false_allows_one_call() -> None:
    one = replace(AUTO, parallel=False)
    a, s, _ = session(one)
    chunk = plan(a, s, UserTurn(1, "i1", "Weather in Paris and Rome?", True))
    assert grammar_of(chunk).matches(CALL) and not grammar_of(chunk).matches(CALL + CALL)
    bare = '{"name": "get_weather", "arguments": ' + json.dumps(PARIS) + "}"
    assert not grammar_of(chunk).matches(bare + bare)
    # a call more than the grammar let through is still not made
    out = stream(a, s, chunk, [CALL, CALL.replace("Paris", "Rome")])
    assert [type(p) for p in out] == [ToolCall, Clause]
    assert s.messages[-1].text.count("<tool_call>") == 1  # the context holds what was made
    several = plan(a, s, _start(2, AUTO))  # a response may allow several
    assert grammar_of(several).matches(CALL + CALL)


def test_a_call_to_a_tool_not_offered_is_dropped() -> None:
    a, s, _ = session(ToolSet((TIME,)))
    chunk = plan(a, s, UserTurn(1, "i1", "Weather?", True))
    out = stream(a, s, chunk, ["Sure. ", CALL])
    assert [type(p) for p in out] == [Clause, Clause] and out[-1].last
    assert "tool_call" not in "".join(c.text for c in out)


def test_words_alone_end_as_before() -> None:
    a, s, _ = session()
    chunk = plan(a, s, UserTurn(1, "i1", "A joke?", True))
    out = stream(a, s, chunk, ["Why did the cat sit on the computer? ", "To keep an eye on",
                               " the mouse! <tool"])
    assert all(isinstance(p, Clause) for p in out) and out[-1].last
    assert "".join(p.text for p in out) == ("Why did the cat sit on the computer? "
                                           "To keep an eye on the mouse! <tool")


@given(st.lists(st.integers(1, len(CALL) + 20), max_size=12))
def test_the_parser_sees_the_same_reply_however_the_stream_is_cut(cuts: list[int]) -> None:
    text = "Okay, one moment {please}. " + CALL + "\n" + CALL.replace("Paris", "Rome")
    pieces, at = [], 0
    for n in cuts:
        pieces.append(text[at:at + n])
        at += n
    pieces.append(text[at:])
    p = CallParser()
    words = "".join(p.push(piece) for piece in pieces) + p.finish()
    assert words == "Okay, one moment {please}. "
    assert [json.loads(c.arguments)["location"] for c in p.calls] == ["Paris", "Rome"]


def test_the_talker_passes_a_call_through_and_the_session_sees_a_function_call() -> None:
    talker = TalkerModel(PiperTts())
    state = talker.open(Fence("s", 0, 0, 1))
    call = ToolCall(1, "get_weather", json.dumps(PARIS))
    [result] = list(talker.step(state, call))
    assert result.visible and result.payload == call
    assert projection.project(2, call) == [FunctionCall(1, "get_weather", json.dumps(PARIS))]
    [end] = [r.payload for r in talker.step(state, Clause(1, "", last=True))]
    assert end == EndOfResponse(1)


def test_the_reply_to_a_tools_output_leans_towards_saying_it() -> None:
    """The spoken tool quiz: with the nudge, 17 of 19 replies to an output called
    the same tool again instead of saying the result."""
    a, s, _ = session()
    asked = plan(a, s, UserTurn(1, "i1", "Weather in Paris?", True))
    assert asked.sampling is not None and asked.sampling["logit_bias"]
    a.on_text(s, asked, CALL, True)
    output = HistoryItem("tool", '{"temperature_c": 17}', "function_call_output",
                         call_id="call_1")
    plan(a, s, Context(None, (output,)))
    answer = plan(a, s, start(2))
    assert answer.sampling is not None
    [[token, bias]] = answer.sampling["logit_bias"]
    assert token == '{"' and bias < 0  # leaning towards saying the result
    assert answer.sampling["grammar_lazy"] is True  # it may still call
    again = plan(a, s, UserTurn(3, "i3", "And in Rome?", True))  # a new request: nudged
    assert again.sampling == asked.sampling


CITY = Tool("get_weather", "The weather in a city now.", {
    "type": "object", "properties": {
        "city": {"type": "string", "description": "The city name, e.g. Paris"}},
    "required": ["city"]})


def _city_call(city: str) -> str:
    return f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}</tool_call>'


def test_a_call_takes_a_descriptions_example_only_once_it_was_said() -> None:
    """The tool quiz: "Good morning! What's your name?" became get_weather(Paris),
    the description's example."""
    a, s, _ = session(ToolSet((CITY,)))
    hello = plan(a, s, UserTurn(1, "i1", "Good morning! What's your name?", True))
    assert not grammar_of(hello).matches(_city_call("Paris"))
    assert grammar_of(hello).matches(_city_call("Oslo"))
    # the assistant's own words (or calls) do not make it said
    a.on_text(s, hello, "I can check the weather in Paris for you.", True)
    yes = plan(a, s, UserTurn(2, "i2", "Yes, please.", True))
    assert not grammar_of(yes).matches(_city_call("Paris"))
    a.on_text(s, yes, "Which city?", True)
    asked = plan(a, s, UserTurn(3, "i3", "paris, please", True))
    assert grammar_of(asked).matches(_city_call("Paris"))
    a, s, _ = session(ToolSet((CITY,)))
    guess = plan(a, s, Draft("Weather in Paris?"))  # the guess's grammar is the turn's
    real = plan(a, s, UserTurn(1, "i1", "Weather in Paris?", True))
    assert guess.sampling == real.sampling and grammar_of(real).matches(_city_call("Paris"))


def test_the_instructions_and_a_tools_output_count_as_said() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context("The user lives in Paris.", (), ToolSet((CITY,))))
    chunk = plan(a, s, UserTurn(1, "i1", "Is it cold outside?", True))
    assert grammar_of(chunk).matches(_city_call("Paris"))
    a, s, _ = session(ToolSet((CITY,)), HistoryItem(
        "tool", '{"home": "Paris"}', "function_call_output", call_id="call_0"))
    assert grammar_of(plan(a, s, start(1))).matches(_city_call("Paris"))
    detached = plan(a, s, replace(start(2), input=()))
    assert not grammar_of(detached).matches(_city_call("Paris"))  # only its own items


MUSIC = Tool("play_music", "Play music by artist, genre, or both.", {
    "type": "object", "properties": {
        "artist": {"type": "string"}, "genre": {"type": "string", "enum": ["jazz", "pop"]}}})


def _music_call(**args: str) -> str:
    return f'{{"name": "play_music", "arguments": {json.dumps(args)}}}'


def test_an_artist_nobody_named_is_left_out_of_the_call_and_the_context() -> None:
    """The tool quiz: "While I wait, play some pop music." was called with
    artist "The Beatles"; a named artist stays."""
    a, s, _ = session(ToolSet((MUSIC,)))
    chunk = plan(a, s, UserTurn(1, "i1", "While I wait, play some pop music.", True))
    [call, end] = stream(a, s, chunk, [_music_call(artist="The Beatles", genre="pop")])
    assert isinstance(call, ToolCall) and json.loads(call.arguments) == {"genre": "pop"}
    assert isinstance(end, Clause) and end.last
    assert "Beatles" not in s.messages[-1].text and '"genre": "pop"' in s.messages[-1].text
    chunk = plan(a, s, UserTurn(2, "i2", "Now something by the beatles.", True))
    [call, _] = stream(a, s, chunk, [_music_call(artist="The Beatles")])
    assert json.loads(call.arguments) == {"artist": "The Beatles"}
