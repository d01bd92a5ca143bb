"""A session's socket changing: one attached (a new client, a resume and its
replay, a socket that replaces another) or one gone.

``duplex.attach`` decides what each socket hears, as steps (sans-I/O); here the
session's worker carries them out, so nothing the session says interleaves with
a replay.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from duplex import attach as at
from duplex.close_codes import CloseCode
from duplex.errors import StoreUnavailable
from gateway.session import runner_items as ri
from gateway.session.emitter import Attachment, outbound

if TYPE_CHECKING:
    from gateway.session.session_runner import SessionRunner

log = logging.getLogger(__name__)


async def attach(runner: SessionRunner, item: ri.Attach) -> None:
    """Make ``item.attachment`` the session's socket; ``item.done`` says whether it
    was taken (False: the resume was refused after all, and the session waits)."""
    emitter = runner.emitter
    old, new = emitter.attachment, item.attachment
    oldest: int | None = None
    if item.cursor is not None:
        oldest, _ = await runner.store.journal_bounds(runner.session_id)
    steps = at.attach_steps(at.Attach(
        new.generation, item.resume_token, item.cursor,
        replacing=old is not None and old is not new, session=runner.core.session_object(),
        oldest=oldest, last_seq=emitter.last_seq, recovery=runner.recovery))
    for step in steps:
        match step:
            case at.SendOld():
                await emitter.send(outbound(step.event))
            case at.EndOld():
                emitter.attachment = None
                assert old is not None
                await old.end(step.code, step.reason)
            case at.Publish():
                emitter.attachment = new
                await emitter.publish([step.event])
            case at.SendNew():
                emitter.attachment = new
                await emitter.send(outbound(step.event))
            case at.Replay():
                runner.recovery = None  # said once
                await emitter.replay(step.cursor)
            case at.Refuse():
                await new.end(step.code, step.reason)
                await detach(runner, new)  # the session waits, as it was
    item.done.set_result(not isinstance(steps[-1], at.Refuse))


async def detach(runner: SessionRunner, attachment: Attachment) -> None:
    """The socket of ``attachment`` went away: keep generating, start the grace.
    The attachment is ended too: its endpoint waits on that, and a socket whose
    send failed may never report its own end (a connection task would leak)."""
    if runner.emitter.attachment is attachment:
        runner.emitter.attachment = None
    await attachment.end(CloseCode.GOING_AWAY, "detached")
    try:
        await runner.store.detach(runner.session_id, attachment.generation, time.time())
    except StoreUnavailable as exc:  # the lease then ends by idle expiry instead
        log.warning("session %s: detach not persisted: %s", runner.session_id, exc)
