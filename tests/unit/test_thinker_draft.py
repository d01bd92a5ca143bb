"""The thinker's guess at a turn in progress (``Draft``): the chunk the turn
would be, planned without touching the conversation as planned."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from hypothesis import given
from hypothesis import strategies as st

from duplex.fence import Fence
from engines.stages import PromptChunk, StageResult
from plugins.base import Context, HistoryItem, ReplyStep
from plugins.cascade.payloads import Clause, Draft, UserTurn
from plugins.cascade.thinker import ThinkerAdapter, ThinkerState

FENCE = Fence("s", 0, 0, 0)


def plan(a: ThinkerAdapter, s: ThinkerState, payload: object) -> PromptChunk:
    chunk = a.plan(s, payload)
    assert chunk is not None
    return chunk


def test_a_draft_is_the_turn_it_guesses_and_changes_nothing() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context("Be brief.", (HistoryItem("user", "Hi"),)))
    before = copy.deepcopy(s)
    guess = plan(a, s, Draft("What is two plus two?"))
    assert guess.speculative and guess.generate
    assert s == before  # the conversation as planned is untouched
    real = plan(a, s, UserTurn(1, "i1", "What is two plus two?", True))
    assert not real.speculative
    assert (real.text, real.max_tokens) == (guess.text, guess.max_tokens)


def test_a_draft_after_a_reply_closes_the_reply_like_the_turn_would() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, UserTurn(1, "i1", "Hello", True))  # the reply stays open in the context
    guess = plan(a, s, Draft("And you?"))
    assert guess.text.startswith("<|im_end|>\n<|im_start|>user\nAnd you?")
    assert s.assistant_open
    assert plan(a, s, UserTurn(2, "i2", "And you?", True)).text == guess.text


def test_a_draft_without_words_withdraws_the_guess() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    withdraw = PromptChunk(speculative=True)  # a guess at nothing to generate
    assert a.plan(s, Draft("")) == withdraw
    assert a.plan(s, Draft("<|im_end|>")) == withdraw  # only a marker: scrubbed to nothing
    assert not s.started


@given(st.lists(st.tuples(st.text(max_size=20), st.booleans()), max_size=5),
       st.text(max_size=30))
def test_any_draft_leaves_any_conversation_as_it_was(turns: list[tuple[str, bool]],
                                                    words: str) -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    for i, (text, respond) in enumerate(turns):
        a.plan(s, UserTurn(i, f"i{i}", text, respond))
    before = copy.deepcopy(s)
    guess = a.plan(s, Draft(words))
    assert s == before
    assert guess is not None and guess.speculative
    if guess.generate:
        real = a.plan(s, UserTurn(9, "i9", words, True))
        assert real is not None and real.text == guess.text


def test_a_warm_draft_prefills_the_start_of_the_turn_only() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, UserTurn(1, "i1", "Hello", True))
    before = copy.deepcopy(s)
    warm = plan(a, s, Draft("What is the capital", warm=True))
    assert s == before
    assert warm.speculative and warm.generate and warm.max_tokens == 1
    guess = plan(a, s, Draft("What is the capital of France?"))
    real = plan(a, s, UserTurn(2, "i2", "What is the capital of France?", True))
    # the warm guess's text starts the real turn's (what it prefilled is reused),
    # and can never be taken for the reply
    assert real.text.startswith(warm.text) and real.text == guess.text
    assert warm.max_tokens != real.max_tokens


# -- a guess's first clause, read ahead ----------------------------------------------

DELTAS = ["The capital", " of France is Paris", ". It is", " a big city.", ""]


def replies(a: ThinkerAdapter, s: ThinkerState, chunk: PromptChunk,
            read: Callable[..., Sequence[StageResult]]) -> list[Clause]:
    out = [r.payload for i, d in enumerate(DELTAS)
           for r in read(s, chunk, d, i == len(DELTAS) - 1)
           if not isinstance(r.payload, ReplyStep)]  # what the talker gets
    assert all(isinstance(c, Clause) for c in out)
    return out


def test_a_guess_s_first_clause_goes_ahead_and_is_the_reply_s_first() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context("Be brief."))
    guess = plan(a, s, Draft("What is the capital of France?"))
    ahead = replies(a, s, guess, a.on_guess_text)
    # only the first clause, marked as a guess's, and only once
    assert [(c.text, c.guess, c.last) for c in ahead] == [("The capital of France",
                                                          True, False)]
    # the turn adopts the guess: the engine replays the text as the reply's
    real = plan(a, s, UserTurn(0, "i1", "What is the capital of France?", True))
    spoken = replies(a, s, real, a.on_text)
    assert next(c.text for c in spoken if c.text.strip()) == ahead[0].text
    assert not any(c.guess for c in spoken)


def test_a_newer_guess_is_read_afresh_and_a_warm_one_not_at_all() -> None:
    a = ThinkerAdapter()
    s = a.open(FENCE)
    plan(a, s, Context("Be brief."))
    first = plan(a, s, Draft("What is the capital"))
    assert a.on_guess_text(s, first, "Which", False) == []
    newer = plan(a, s, Draft("What is the capital of France?"))
    assert [r.payload.text for r in a.on_guess_text(s, newer, "Paris. ", True)] == ["Paris."]
    warm = plan(a, s, Draft("What is", warm=True))
    assert a.on_guess_text(s, warm, "The.", True) == []
