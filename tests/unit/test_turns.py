"""Turn and response state tables (duplex/turns.py): every (state, event) pair."""

from __future__ import annotations

import itertools

import pytest

from duplex.errors import InvalidTransition
from duplex.turns import (
    RESPONSE_TRANSITIONS,
    TURN_TRANSITIONS,
    ResponseEvent,
    ResponseStatus,
    TurnEvent,
    TurnState,
    next_response_status,
    next_turn_state,
)

T, E = TurnState, TurnEvent
R, RE = ResponseStatus, ResponseEvent

# The expected tables, written out independently of the module's.
EXPECTED_TURN: dict[TurnState, dict[TurnEvent, TurnState]] = {
    T.IDLE: {
        E.SPEECH_STARTED: T.USER_SPEAKING, E.SPEECH_STOPPED: T.IDLE,
        E.INPUT_COMMITTED: T.IDLE, E.INPUT_CLEARED: T.IDLE,
        E.RESPONSE_STARTED: T.RESPONDING, E.CLOSE: T.CLOSED,
    },
    T.USER_SPEAKING: {
        E.SPEECH_STARTED: T.USER_SPEAKING, E.SPEECH_STOPPED: T.IDLE,
        E.INPUT_COMMITTED: T.IDLE, E.INPUT_CLEARED: T.IDLE,
        E.RESPONSE_STARTED: T.RESPONDING, E.CLOSE: T.CLOSED,
    },
    T.RESPONDING: {
        E.SPEECH_STARTED: T.OVERLAP, E.SPEECH_STOPPED: T.RESPONDING,
        E.INPUT_COMMITTED: T.RESPONDING, E.INPUT_CLEARED: T.RESPONDING,
        E.RESPONSE_ENDED: T.IDLE, E.CLOSE: T.CLOSED,
    },
    T.OVERLAP: {
        E.SPEECH_STARTED: T.OVERLAP, E.SPEECH_STOPPED: T.RESPONDING,
        E.INPUT_COMMITTED: T.RESPONDING, E.INPUT_CLEARED: T.RESPONDING,
        E.RESPONSE_ENDED: T.USER_SPEAKING, E.CLOSE: T.CLOSED,
    },
    T.CLOSED: {},
}

EXPECTED_RESPONSE: dict[ResponseStatus, dict[ResponseEvent, ResponseStatus]] = {
    R.IN_PROGRESS: {RE.FINISH: R.COMPLETED, RE.CANCEL: R.CANCELLED, RE.FAIL: R.FAILED,
                    RE.CUT_SHORT: R.INCOMPLETE},
    R.COMPLETED: {}, R.CANCELLED: {}, R.FAILED: {}, R.INCOMPLETE: {},
}

TURN_PAIRS = list(itertools.product(TurnState, TurnEvent))
RESPONSE_PAIRS = list(itertools.product(ResponseStatus, ResponseEvent))


def test_tables_cover_every_state() -> None:
    assert set(TURN_TRANSITIONS) == set(TurnState)
    assert set(RESPONSE_TRANSITIONS) == set(ResponseStatus)
    assert {s: dict(m) for s, m in TURN_TRANSITIONS.items()} == EXPECTED_TURN
    assert {s: dict(m) for s, m in RESPONSE_TRANSITIONS.items()} == EXPECTED_RESPONSE


@pytest.mark.parametrize(("state", "event"), TURN_PAIRS, ids=lambda x: str(x))
def test_turn_pair(state: TurnState, event: TurnEvent) -> None:
    expected = EXPECTED_TURN[state].get(event)
    before = state
    if expected is None:
        with pytest.raises(InvalidTransition) as info:
            next_turn_state(state, event)
        assert info.value.code == "invalid_transition"
        assert state is before  # nothing to mutate: the state is a value
    else:
        assert next_turn_state(state, event) is expected


@pytest.mark.parametrize(("status", "event"), RESPONSE_PAIRS, ids=lambda x: str(x))
def test_response_pair(status: ResponseStatus, event: ResponseEvent) -> None:
    expected = EXPECTED_RESPONSE[status].get(event)
    if expected is None:
        with pytest.raises(InvalidTransition):
            next_response_status(status, event)
    else:
        assert next_response_status(status, event) is expected


@pytest.mark.parametrize("event", list(TurnEvent))
def test_closed_accepts_nothing(event: TurnEvent) -> None:
    with pytest.raises(InvalidTransition):
        next_turn_state(T.CLOSED, event)


def test_unlisted_pairs_exist_and_every_state_can_close() -> None:
    unlisted = [(s, e) for s, e in TURN_PAIRS if e not in EXPECTED_TURN[s]]
    assert (T.IDLE, E.RESPONSE_ENDED) in unlisted
    assert (T.RESPONDING, E.RESPONSE_STARTED) in unlisted
    for state in TurnState:
        if state is not T.CLOSED:
            assert next_turn_state(state, E.CLOSE) is T.CLOSED


def test_a_response_ends_exactly_once() -> None:
    for first in ResponseEvent:
        ended = next_response_status(R.IN_PROGRESS, first)
        for second in ResponseEvent:
            with pytest.raises(InvalidTransition):
                next_response_status(ended, second)


def test_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        TURN_TRANSITIONS[T.IDLE] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        RESPONSE_TRANSITIONS[R.IN_PROGRESS] = {}  # type: ignore[index]


def test_a_walk_through_barge_in_off() -> None:
    state = T.IDLE
    for event, expected in [
        (E.SPEECH_STARTED, T.USER_SPEAKING), (E.SPEECH_STOPPED, T.IDLE),
        (E.INPUT_COMMITTED, T.IDLE), (E.RESPONSE_STARTED, T.RESPONDING),
        (E.SPEECH_STARTED, T.OVERLAP), (E.RESPONSE_ENDED, T.USER_SPEAKING),
        (E.CLOSE, T.CLOSED),
    ]:
        state = next_turn_state(state, event)
        assert state is expected
