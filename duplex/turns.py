"""Turn and response state machines, declared as data.

Rules:

1. The conversation alternates between the user's turn and the assistant's
   response, but they may overlap: the user can start speaking while a response
   plays (``RESPONDING`` → ``USER_SPEAKING`` when barge-in is off, or a cancel
   when it is on).
2. A response ends exactly once: completed, cancelled or failed.
3. An event a table does not list for the current state raises
   ``InvalidTransition`` and leaves the state unchanged.

``tools/state_diagram.py`` could draw these tables; tests walk them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from duplex.errors import InvalidTransition


class TurnState(enum.StrEnum):
    IDLE = "idle"
    USER_SPEAKING = "user_speaking"
    RESPONDING = "responding"
    # the user speaks while a response still plays and barge-in is disabled
    OVERLAP = "overlap"
    CLOSED = "closed"


class TurnEvent(enum.StrEnum):
    SPEECH_STARTED = "speech_started"
    SPEECH_STOPPED = "speech_stopped"
    INPUT_COMMITTED = "input_committed"
    INPUT_CLEARED = "input_cleared"
    RESPONSE_STARTED = "response_started"
    RESPONSE_ENDED = "response_ended"
    CLOSE = "close"


_T, _E = TurnState, TurnEvent

TURN_TRANSITIONS: Mapping[TurnState, Mapping[TurnEvent, TurnState]] = MappingProxyType({
    _T.IDLE: {
        _E.SPEECH_STARTED: _T.USER_SPEAKING,
        _E.SPEECH_STOPPED: _T.IDLE,
        _E.INPUT_COMMITTED: _T.IDLE,
        _E.INPUT_CLEARED: _T.IDLE,
        _E.RESPONSE_STARTED: _T.RESPONDING,
        _E.CLOSE: _T.CLOSED,
    },
    _T.USER_SPEAKING: {
        _E.SPEECH_STARTED: _T.USER_SPEAKING,
        _E.SPEECH_STOPPED: _T.IDLE,
        _E.INPUT_COMMITTED: _T.IDLE,
        _E.INPUT_CLEARED: _T.IDLE,
        _E.RESPONSE_STARTED: _T.RESPONDING,
        _E.CLOSE: _T.CLOSED,
    },
    _T.RESPONDING: {
        _E.SPEECH_STARTED: _T.OVERLAP,
        _E.SPEECH_STOPPED: _T.RESPONDING,
        _E.INPUT_COMMITTED: _T.RESPONDING,
        _E.INPUT_CLEARED: _T.RESPONDING,
        _E.RESPONSE_ENDED: _T.IDLE,
        _E.CLOSE: _T.CLOSED,
    },
    _T.OVERLAP: {
        _E.SPEECH_STARTED: _T.OVERLAP,
        _E.SPEECH_STOPPED: _T.RESPONDING,
        _E.INPUT_COMMITTED: _T.RESPONDING,
        _E.INPUT_CLEARED: _T.RESPONDING,
        _E.RESPONSE_ENDED: _T.USER_SPEAKING,
        _E.CLOSE: _T.CLOSED,
    },
    _T.CLOSED: {},
})


def next_turn_state(state: TurnState, event: TurnEvent) -> TurnState:
    try:
        return TURN_TRANSITIONS[state][event]
    except KeyError:
        raise InvalidTransition(f"turn: {event} is not allowed in {state}") from None


class ResponseStatus(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INCOMPLETE = "incomplete"


class ResponseEvent(enum.StrEnum):
    FINISH = "finish"
    CANCEL = "cancel"
    FAIL = "fail"
    CUT_SHORT = "cut_short"  # max_output_tokens reached


_R, _RE = ResponseStatus, ResponseEvent

RESPONSE_TRANSITIONS: Mapping[ResponseStatus, Mapping[ResponseEvent, ResponseStatus]] = (
    MappingProxyType({
        _R.IN_PROGRESS: {
            _RE.FINISH: _R.COMPLETED,
            _RE.CANCEL: _R.CANCELLED,
            _RE.FAIL: _R.FAILED,
            _RE.CUT_SHORT: _R.INCOMPLETE,
        },
        _R.COMPLETED: {},
        _R.CANCELLED: {},
        _R.FAILED: {},
        _R.INCOMPLETE: {},
    })
)


def next_response_status(status: ResponseStatus, event: ResponseEvent) -> ResponseStatus:
    try:
        return RESPONSE_TRANSITIONS[status][event]
    except KeyError:
        raise InvalidTransition(f"response: {event} is not allowed in {status}") from None
