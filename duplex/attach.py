"""Attaching a socket to a session, sans-I/O: what the new socket hears, what
becomes of the one it replaces, and the one rule for a journal gap.

The runner feeds an ``Attach`` (what it knows when the socket arrives on the
session's worker) to ``attach_steps`` and executes the steps in order. The
same rule answers a resume whose cursor the journal no longer covers, whether
that is found before the attachment moved on (``check_cursor``, in the resume
handshake) or after (here): the client hears ``session.resync_required`` and
its socket closes normally; the session itself stays as it was, detached and
resumable with a cursor the journal covers. No journal gap ever ends a session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from duplex import events as ev
from duplex.close_codes import CloseCode
from duplex.journal import ReplayPlan, ReplayVerdict, plan_replay

GAP_CLOSE_REASON = "resync_required"


@dataclass(frozen=True, slots=True)
class Recovery:
    """This process took the session over from a dead owner (docs/architecture.md §8)."""

    lost_response_id: str | None


@dataclass(frozen=True, slots=True)
class Attach:
    generation: int  # the new socket's attachment generation
    resume_token: str  # the (rotated) token the new socket is told
    cursor: int | None  # None: a new session, so session.created
    replacing: bool  # another socket is attached now
    session: ev.Event  # the session object
    oldest: int | None = None  # the journal's bounds, for a resume
    last_seq: int = 0
    recovery: Recovery | None = None


# -- steps -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendOld:
    """Tell the socket being replaced, unjournaled (it hears nothing after)."""

    event: ev.Event


@dataclass(frozen=True, slots=True)
class EndOld:
    code: CloseCode
    reason: str


@dataclass(frozen=True, slots=True)
class Publish:
    """Journal and send to the new socket (I4)."""

    event: ev.Event


@dataclass(frozen=True, slots=True)
class SendNew:
    """Send to the new socket, unjournaled (it is about this attachment only)."""

    event: ev.Event


@dataclass(frozen=True, slots=True)
class Replay:
    """Send the journaled events after ``cursor``, in order."""

    cursor: int


@dataclass(frozen=True, slots=True)
class Refuse:
    """Close the new socket and detach it: the session waits for another resume."""

    code: CloseCode
    reason: str


AttachStep = SendOld | EndOld | Publish | SendNew | Replay | Refuse


def attach_steps(a: Attach) -> list[AttachStep]:
    steps: list[AttachStep] = []
    if a.replacing:  # the old socket hears why, then nothing more (R18)
        steps += [SendOld(ev.event(ev.E.SESSION_REPLACED, attachment_generation=a.generation)),
                  EndOld(CloseCode.SESSION_REPLACED, "session.replaced")]
    if a.cursor is None:
        return [*steps, Publish(ev.event(ev.E.SESSION_CREATED, session=a.session,
                                         resume_token=a.resume_token))]
    plan = plan_replay(a.cursor, a.oldest, a.last_seq)
    if plan.verdict is ReplayVerdict.JOURNAL_GAP:
        return [*steps, SendNew(resync_required(a.oldest, plan.last_seq)),
                Refuse(CloseCode.NORMAL, GAP_CLOSE_REASON)]
    recovered: dict[str, Any] = ({"recovered": True,
                                  "lost_response_id": a.recovery.lost_response_id}
                                 if a.recovery is not None else {"recovered": False})
    resumed = ev.event(ev.E.SESSION_RESUMED, session=a.session, resume_token=a.resume_token,
                       attachment_generation=a.generation, last_server_event_seq=plan.last_seq,
                       replay_count=plan.last_seq - a.cursor, **recovered)
    return [*steps, SendNew(resumed), Replay(a.cursor)]


def check_cursor(cursor: int, oldest: int | None, last_seq: int) -> ReplayPlan:
    """The resume handshake's check, before the attachment moves on: the plan, or
    (``JOURNAL_GAP``) the same answer ``attach_steps`` gives, sent by the caller
    as ``resync_required`` and a normal close."""
    return plan_replay(cursor, oldest, last_seq)


def resync_required(oldest: int | None, last_seq: int) -> ev.Event:
    return ev.event(ev.E.SESSION_RESYNC_REQUIRED, reason=ReplayVerdict.JOURNAL_GAP.value,
                    oldest_server_event_seq=oldest, last_server_event_seq=last_seq)


def lost_response_done(response_id: str) -> ev.Event:
    """After a takeover the reply in flight is gone: its closing ``response.done``."""
    return ev.event(ev.E.RESPONSE_DONE, response={
        "id": response_id, "object": "realtime.response", "status": "failed",
        "status_details": {"type": "failed", "reason": "server_restarted", "error": None},
        "output": [], "usage": None})


MAX_DURATION = "max_duration"  # the session reached its lifetime (--max-session-s)


def expired_error(reason: str, max_session_s: float | None) -> ev.Event:
    """How a session's end reaches an OpenAI client: OpenAI's ``session_expired``
    error, before the close (``session.expired`` is the duplex extension's)."""
    if reason == MAX_DURATION and max_session_s:
        minutes = max_session_s / 60
        message = f"Your session hit the maximum duration of {minutes:g} minutes."
    else:
        message = f"Your session expired ({reason})."
    return ev.event(ev.E.ERROR, error={"type": "invalid_request_error",
                                       "code": "session_expired", "message": message,
                                       "param": None, "event_id": None})


def reaped_terminal(session_id: str, reason: str) -> ev.Event:
    """The ``session.expired`` a reaper journals for a dead owner's session; its
    ``server_event_seq`` 0 is the placeholder the store stamps the real seq into."""
    return ev.event(ev.E.SESSION_EXPIRED, reason=reason,
                    event_id=f"event_{session_id[-8:]}_expired", server_event_seq=0)
