"""A turn the listener is unsure of is not acted on (``plugins.cascade.heard``):
the decision by score and threshold, and the thinkers' reply to such a turn
(a request to say it again, no model, no call; a guess at it; the history it
leaves), without a model."""

from __future__ import annotations

import pytest

from duplex.fence import Fence
from duplex.tools import Tool, ToolChoice, ToolSet
from engines.stages import ChatChunk, PromptChunk, StageResult
from plugins.base import Context
from plugins.cascade.chat_thinker import ChatThinker
from plugins.cascade.heard import UNSURE_BELOW, Heard, is_unsure, unsure_below
from plugins.cascade.payloads import Clause, Draft, ToolCall, UserTurn
from plugins.cascade.thinker import SAY_AGAIN, ThinkerAdapter, ThinkerState

FENCE = Fence("s", 0, 0, 0)
FLIGHT = Tool("lookup_flight", "The status of a flight.", {
    "type": "object", "properties": {"flight_number": {"type": "string"}},
    "required": ["flight_number"]})
AUTO = ToolSet((FLIGHT,))
MISHEARD = "Is right away I'm hungry than two at a time."


# -- the decision ----------------------------------------------------------------------


def test_a_score_below_the_threshold_is_unsure_and_at_or_above_it_is_not() -> None:
    assert is_unsure(Heard("what is the capital immediately", -0.57), UNSURE_BELOW)
    assert not is_unsure(Heard("What is the capital of Egypt?", -0.11), UNSURE_BELOW)
    assert not is_unsure(Heard("words", UNSURE_BELOW), UNSURE_BELOW)  # strictly below
    assert is_unsure(Heard("words", -0.35), -0.3) and not is_unsure(Heard("words", -0.35), -0.4)


def test_off_no_score_or_no_words_are_never_unsure() -> None:
    assert not is_unsure(Heard("words", -3.0), None)  # off
    assert not is_unsure(Heard("words", None), UNSURE_BELOW)  # a recognizer that gives none
    assert not is_unsure(Heard("", -3.0), UNSURE_BELOW)  # nothing heard has its own line
    assert not is_unsure(Heard("  ", -3.0), UNSURE_BELOW)


def test_the_setting_is_a_log_probability_or_off() -> None:
    assert unsure_below(None) == unsure_below("") == UNSURE_BELOW
    assert unsure_below("off") is None and unsure_below(" OFF ") is None
    assert unsure_below("-0.4") == -0.4 and unsure_below("0") == 0.0
    for bad in ("0.5", "nan", "-inf", "sure", "1e9"):
        with pytest.raises(ValueError, match="DUPLEX_GATEWAY_ASR_UNSURE_BELOW"):
            unsure_below(bad)


# -- the local thinker (ChatML on llama.cpp or vLLM) ---------------------------------------


def plan(a: ThinkerAdapter, s: ThinkerState, payload: object) -> PromptChunk:
    chunk = a.plan(s, payload)
    assert chunk is not None
    return chunk


def opened(tools: ToolSet = AUTO) -> tuple[ThinkerAdapter, ThinkerState]:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context(None, (), tools))
    return a, s


def said(results: tuple[StageResult, ...]) -> list[object]:
    return [r.payload for r in results]


def test_an_unsure_turn_is_answered_with_a_request_to_say_it_again_and_no_call() -> None:
    a, s = opened()
    chunk = plan(a, s, UserTurn(1, "i1", MISHEARD, True, unsure=True))
    # no generation at all: the model can neither answer the wrong words nor call
    assert not chunk.generate and chunk.sampling is None
    assert said(chunk.emit) == [Clause(1, SAY_AGAIN, last=True)]
    assert not any(isinstance(p, ToolCall) for p in said(chunk.emit))
    assert SAY_AGAIN.endswith("?") and "again" in SAY_AGAIN
    # the context holds both turns, so the model reads the request as its own
    assert chunk.text.endswith(f"<|im_start|>user\n{MISHEARD}<|im_end|>\n"
                               f"<|im_start|>assistant\n{SAY_AGAIN}<|im_end|>\n")
    assert s.tools == AUTO  # the session's tools are as they were


def test_the_next_turn_after_it_is_planned_as_ever_with_its_tools() -> None:
    a, s = opened()
    plan(a, s, UserTurn(1, "i1", MISHEARD, True, unsure=True))
    assert [(m.role, m.text) for m in s.messages[1:]] == [("user", MISHEARD),
                                                         ("assistant", SAY_AGAIN)]
    nxt = plan(a, s, UserTurn(2, "i2", "Is flight UA 902 on time?", True))
    assert nxt.text.startswith("<|im_start|>user\nIs flight UA 902 on time?")  # nothing open
    assert nxt.generate and nxt.sampling is not None and nxt.sampling["grammar_lazy"] is True
    _, fresh = opened()
    assert nxt.sampling == plan(a, fresh, UserTurn(1, "i1", "Is flight UA 902 on time?",
                                                   True)).sampling


def test_a_sure_turn_plans_as_before() -> None:
    a, s = opened()
    plain = plan(a, s, UserTurn(1, "i1", MISHEARD, True))
    assert plain.generate and not plain.emit and SAY_AGAIN not in plain.text


def test_an_unsure_turn_without_a_reply_or_under_a_required_call_is_a_plain_turn() -> None:
    a, s = opened()
    quiet = plan(a, s, UserTurn(1, "i1", MISHEARD, False, unsure=True))
    assert not quiet.generate and not quiet.emit  # the client asks for the reply later
    assert quiet.text.endswith(f"<|im_start|>user\n{MISHEARD}<|im_end|>\n")
    a, s = opened(ToolSet(AUTO.tools, ToolChoice("required")))
    chunk = plan(a, s, UserTurn(1, "i1", MISHEARD, True, unsure=True))
    assert chunk.generate and not chunk.emit  # the client asked for a call on every reply
    assert chunk.sampling is not None and chunk.sampling["grammar_lazy"] is False


def test_an_unsure_draft_withdraws_the_guess_and_runs_none() -> None:
    a, s = opened()
    before = list(s.messages)
    assert plan(a, s, Draft(MISHEARD, unsure=True)) == PromptChunk(speculative=True)
    assert s.messages == before  # a draft changes nothing
    guess = plan(a, s, Draft(MISHEARD))  # the same words, heard sure: a guess as ever
    assert guess.speculative and guess.generate
    assert guess.text == plan(a, s, UserTurn(1, "i1", MISHEARD, True)).text


def test_an_unsure_turn_without_tools_gets_the_same_line() -> None:
    a, s = opened(ToolSet())
    chunk = plan(a, s, UserTurn(1, "i1", MISHEARD, True, unsure=True))
    assert said(chunk.emit) == [Clause(1, SAY_AGAIN, last=True)] and not chunk.generate


# -- the thinker on a model server ---------------------------------------------------


def test_the_chat_thinker_answers_an_unsure_turn_the_same_way() -> None:
    thinker = ChatThinker()
    state = thinker.open(FENCE)
    thinker.plan(state, Context(None, (), AUTO))
    chunk = thinker.plan(state, UserTurn(1, "i1", MISHEARD, True, unsure=True))
    assert isinstance(chunk, ChatChunk) and not chunk.generate
    assert [r.payload for r in chunk.emit] == [Clause(1, SAY_AGAIN, last=True)]
    assert list(chunk.messages)[-2:] == [{"role": "user", "content": MISHEARD},
                                          {"role": "assistant", "content": SAY_AGAIN}]
    sure = thinker.plan(state, UserTurn(2, "i2", "Is flight UA 902 on time?", True))
    assert isinstance(sure, ChatChunk) and sure.generate and sure.tool_choice == "auto"
