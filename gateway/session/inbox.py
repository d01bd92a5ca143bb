"""A session's inbox: everything its worker is to handle, and the one place it waits.

Lanes (I7: control beats media). They are served in order: urgent before
control before events before media. Within a lane order is first-in first-out,
with one exception: a command that must not wait behind the user's audio
(``response.cancel``, ``session.close``) goes ahead of the audio appends queued
at the end of the control lane, and no further (it never overtakes a commit, a
``response.create`` or anything else whose meaning depends on order). Every
lane but the urgent one is bounded; a full lane raises ``CapacityError`` to the
producer instead of growing (I8). The urgent lane carries only the runner's own
items (attach, detach, close, lease news), at most a few per attachment.

Timed media. Reply audio waits in the media lane until it is due:
``duplex.pacing.Pacer`` releases it at most ``lead_ms`` ahead of real time.
A cancel calls ``drop_stale``, so nothing of the old epoch still held here
reaches the client after its ``response.done{cancelled}`` (I2).

Timers. The session's lifetime (``--max-session-s``, from when it opened,
across takeovers) and the idle timeout after a reply (``idle_timeout_ms``,
``duplex.idle``) are deadlines here: once due, each becomes an item in its lane
(a lifetime's end is an urgent close; an idle timeout goes behind the commands
already queued, never refused), handled in order with everything else.

One wait. The worker takes what is ready (``ready``: a queued item, else the
media's head once due) until nothing is, then parks (``wait``). While it is
parked, a put or a deadline (the media's head, a timer, on the session's
``Clock``) hands what became ready to the worker's ``take``: a client command
at once, in the socket's callback that read it (50 appends a second a session:
a call, not a loop callback or a task switch), as it is when nothing else is
queued, so ``ready`` is asked once a frame; anything else at the end of that
turn of the event loop, with everything else put in the same turn (a cancel
that overtook queued audio, a stage's deltas). Only when ``take`` meets
something that must wait (a journal write, a stage submit) does the worker's
task resume, with it. Whatever is queued while the worker works is taken
before it parks again. Every item goes the same way, one at a time, in lane
order.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from duplex import attach as at
from duplex import commands as c
from duplex.errors import CapacityError
from duplex.events import ServerEvent
from duplex.fence import Fence, is_current_epoch
from duplex.pacing import Pacer
from gateway.log_limits import LogLimiter
from gateway.session.attachment import Attachment
from gateway.session.clock import Clock, Timer
from gateway.session.items import (
    OVERTAKE_AUDIO,
    Close,
    Delta,
    Detach,
    Failure,
    IdleElapsed,
    SessionLimits,
    is_audio,
)
from plugins import base as pb

log = logging.getLogger(__name__)

T = TypeVar("T")


class Lane(enum.IntEnum):
    URGENT = 0  # attach, detach, close, token confirmations: never refused
    CONTROL = 1  # client commands, failures, timeouts
    EVENTS = 2  # unpaced stage output (transcripts)
    MEDIA = 3  # paced reply output, each item once due


class Inbox:
    def __init__(self, name: str, limits: SessionLimits, clock: Clock,
                 output_rate: int) -> None:
        self._name = name  # for the log: "session <id>"
        self._warn = LogLimiter(log)  # what a client can trigger at will: one line a while
        self._lanes: dict[Lane, deque[Any]] = {lane: deque() for lane in Lane}
        self._limits = {Lane.URGENT: 0, Lane.CONTROL: limits.max_pending_commands,
                        Lane.EVENTS: limits.max_pending_events,
                        Lane.MEDIA: limits.max_pending_audio}
        # the untimed lanes in serving order, for get() (50 calls a second a session:
        # iterating the enum costs more than the rest of it)
        self._in_order = tuple(self._lanes[lane] for lane in sorted(Lane)
                               if lane is not Lane.MEDIA)
        self._control = self._lanes[Lane.CONTROL]
        self._media: deque[Delta] = self._lanes[Lane.MEDIA]
        self._media_waiting: tuple[Delta, float] | None = None  # the head, and when due
        self._pacer = Pacer(limits.lead_ms)
        self._rate = output_rate
        self._clock = clock
        self._lifetime = math.inf  # when the session expires (clock.now() time)
        self._idle: tuple[float, int] | None = None  # (when, token)
        self._timer: Timer | None = None  # at the earliest of the two
        self._timers_due = False  # it ran: see which are due (no clock read an item)
        self._media_at = math.inf  # when the media's head is due, as ready() last found
        self._loop: asyncio.AbstractEventLoop | None = None  # looked up once (a syscall)
        # the parked worker: what takes the items as they come, and the future it waits on
        self._parked: tuple[Callable[[Any], Any], asyncio.Future[Any]] | None = None
        self._handing = False  # a hand-over to the parked worker is due this turn
        self._wake: Timer | None = None  # the wake-up at the media's due time
        self._wake_at = math.inf  # its time (inf: none): compared before each park
        self.waits = 0  # times the worker waited (tests, benches)

    # -- producers --------------------------------------------------------------------

    def put(self, lane: Lane, item: Any) -> None:
        self._check_room(lane)
        self._lanes[lane].append(item)
        self._signal()

    def put_ahead(self, lane: Lane, item: Any, *, of: Callable[[Any], bool],
                  refusable: bool = True) -> None:
        """Queue ``item`` ahead of the run of items at the lane's end for which
        ``of(item)`` holds (behind everything else); with ``refusable=False`` even
        into a full lane (an item that must not be lost, such as the client's close)."""
        if refusable:
            self._check_room(lane)
        queue = self._lanes[lane]
        index = len(queue)
        while index and of(queue[index - 1]):
            index -= 1
        queue.insert(index, item)
        self._signal()

    def put_urgent(self, item: Any) -> None:
        """An item that must never be refused or wait (close, detach, attach)."""
        self._lanes[Lane.URGENT].append(item)
        self._signal()

    def _check_room(self, lane: Lane) -> None:
        if len(self._lanes[lane]) >= self._limits[lane]:
            raise CapacityError(f"session {lane.name.lower()} queue is full",
                                code="input_backpressure" if lane is Lane.CONTROL
                                else "output_backpressure")

    def offer_media(self, item: Delta) -> bool:
        """Hold reply output until it is due, in order; False (and not held) when full."""
        if len(self._media) >= self._limits[Lane.MEDIA]:
            return False
        self._media.append(item)
        self._signal()
        return True

    # -- what the session's producers queue ------------------------------------------------

    def command(self, cmd: c.Command) -> None:
        """A client command; raises ``CapacityError`` when the session is flooded. A
        cancel or close goes ahead of the audio still queued (I7)."""
        if isinstance(cmd, OVERTAKE_AUDIO):
            self.put_ahead(Lane.CONTROL, cmd, of=is_audio)
            return
        control = self._control  # put(), unrolled: 50 appends a second a session
        if self._parked is not None and not self._handing and not control:
            # the socket's own callback, and a worker parked on an empty inbox: it
            # takes the command now, as a call (a loop callback a frame cost ~2 % of
            # the relay), handed over rather than left in a lane it would leave at
            # once; a burst read at once is taken frame by frame, in its order
            self._hand_over(cmd)
            return
        if len(control) >= self._limits[Lane.CONTROL]:
            self._check_room(Lane.CONTROL)
        control.append(cmd)
        self._signal()

    def detach(self, attachment: Attachment) -> None:
        """``attachment``'s socket went away (a send to it failed): the session goes
        on, resumable."""
        self.put_urgent(Detach(attachment))

    def client_closed(self, reason: str) -> None:
        """The client ended the session: after everything it sent before, but ahead
        of its queued audio (I7), and never refused."""
        self.put_ahead(Lane.CONTROL, Close(reason), of=is_audio, refusable=False)

    def stage_output(self, fence: Fence, stage: int, deltas: Sequence[pb.Delta]) -> None:
        """A stage's visible output: transcripts (and the words so far) as they
        come, reply output in order once due; reply output beyond the bound fails
        the stage's request (I8)."""
        for delta in deltas:
            item = Delta(fence, delta)
            if isinstance(delta, pb.Transcript | pb.WordsHeard):
                self.offer(Lane.EVENTS, item)
            elif not self.offer_media(item):
                self.offer(Lane.CONTROL, Failure(fence, "output_backpressure", stage))

    def offer(self, lane: Lane, item: Any) -> None:
        """``item`` unless ``lane`` is full (then it is dropped, and that logged)."""
        try:
            self.put(lane, item)
        except CapacityError:
            self._warn.warning(f"full-{lane.name}", "%s: %s lane full; dropping",
                               self._name, lane.name)

    # -- the worker's ---------------------------------------------------------------------

    def drop_stale(self, live: Fence) -> None:
        """A cancel (I2): forget the media of epochs before ``live``'s; pacing starts
        afresh."""
        kept = [item for item in self._media if is_current_epoch(live, item.fence)]
        self._media.clear()
        self._media.extend(kept)
        self._pacer.reset()
        self._media_waiting = None

    def expire_at(self, wall: float) -> None:
        """The session's lifetime ends at ``wall`` (the store's time): then an urgent
        ``session.expired``."""
        self._lifetime = self._clock.now() + max(0.0, wall - self._clock.wall())
        self._timers_changed()

    def idle_at(self, when: float, token: int) -> None:
        """The core's idle timer ``token`` runs out at ``when``; a newer one replaces it."""
        self._idle = (when, token)
        self._timers_changed()

    def _timers_changed(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        soonest = min(self._lifetime, self._idle[0] if self._idle else math.inf)
        self._timer = None if soonest == math.inf else self._clock.call_at(
            soonest, self._timers_up)

    def _timers_up(self) -> None:
        self._timer = None
        self._timers_due = True
        self._signal()

    def drain(self, lane: Lane) -> list[Any]:
        items = list(self._lanes[lane])
        self._lanes[lane].clear()
        return items

    def close(self) -> None:
        for timer in (self._timer, self._wake):
            if timer is not None:
                timer.cancel()
        self._timer = self._wake = None
        self._wake_at = math.inf
        self._parked = None

    def held(self, lane: Lane) -> int:
        """How many items ``lane`` holds (the media lane: due or not)."""
        return len(self._lanes[lane])

    def __len__(self) -> int:
        return sum(len(q) for q in self._lanes.values())

    def ready(self) -> Any | None:
        """The next item to handle now: a queued one, else the media's head once due;
        None when there is none."""
        if self._timers_due:
            self._fire_timers()
        for queue in self._in_order:
            if queue:
                return queue.popleft()
        self._media_at = math.inf
        if self._media:
            due = self._media_due()
            if due is None:
                return self._media.popleft()
            self._media_at = due
        return None

    def wait(self, take: Callable[[Any], T | None]) -> asyncio.Future[T]:
        """Park the worker: from now on, whatever becomes ready (a put, a deadline) is
        handed to ``take`` at once, in the turn that made it ready, until ``take``
        returns something (what is left to wait on): the future's result. ``take``
        gets a client command put while the inbox was empty (the first item to
        take: it never sat in a lane), or None (take what is ``ready``). Call it
        when ``take`` found nothing. A future, not a coroutine; and while the worker
        is parked an item costs a call, not a task switch (50 a second a session)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._parked = (take, future)
        if self._media_at != self._wake_at:
            self._arm(self._media_at)
        self.waits += 1
        return future

    async def get(self) -> Any:
        """The next item to handle, waiting for it when none is ready."""
        item = self.ready()
        return item if item is not None else await self.wait(self._handed_or_ready)

    def _handed_or_ready(self, item: Any) -> Any | None:
        return item if item is not None else self.ready()

    def _signal(self) -> None:
        """Something may be ready: a parked worker takes it at the end of this turn,
        with whatever else is put meanwhile (a busy worker looks before it parks
        again)."""
        if self._parked is not None and not self._handing:
            self._handing = True
            assert self._loop is not None  # set by wait(), which parked the worker
            self._loop.call_soon(self._hand_over)

    def _hand_over(self, cmd: c.Command | None = None) -> None:
        """The parked worker takes ``cmd`` (a command put while the inbox was empty),
        or else what is ready."""
        self._handing = False
        parked = self._parked
        if parked is None:
            return
        take, future = parked
        self._parked = None  # not parked while it takes: a put meanwhile is queued
        if future.done():  # the worker was cancelled: the command stays queued
            if cmd is not None:
                self._control.append(cmd)
            return
        try:
            left = take(cmd)
        except BaseException as exc:
            future.set_exception(exc)
            return
        if left is not None:
            future.set_result(left)
        else:
            self._parked = parked
            if self._media_at != self._wake_at:  # compared here: a call only to change it
                self._arm(self._media_at)

    def _media_due(self) -> float | None:
        """When the media's head may go, as the pacer says; None when now (then the
        pacer counts it released)."""
        item = self._media[0]
        now = self._clock.now()
        waiting = self._media_waiting
        if waiting is not None and waiting[0] is item and now < waiting[1]:
            return waiting[1]  # as the pacer said (it moves only on a release)
        delta = item.delta
        if not isinstance(delta, pb.Speech):
            return None  # not paced, but in order with the audio
        key = (item.fence.epoch, delta.turn_id)
        due = self._pacer.due(key, now)
        if due > now:
            self._media_waiting = (item, due)
            return due
        self._pacer.released(key, now, 1000.0 * len(delta.pcm) / self._rate)
        return None

    def _fire_timers(self) -> None:
        """The timers that are due become items (a timer's wake-up may come a little
        early: what is not due yet is armed again)."""
        self._timers_due = False
        now = self._clock.now()
        if self._lifetime <= now:
            self._lifetime = math.inf
            self.put_urgent(Close(at.MAX_DURATION, ServerEvent.SESSION_EXPIRED))
        if self._idle is not None and self._idle[0] <= now:
            # behind the commands already queued, and never refused: it must be heard
            self._lanes[Lane.CONTROL].append(IdleElapsed(self._idle[1]))
            self._idle = None
        self._timers_changed()

    def _arm(self, when: float) -> None:
        """The one wake-up moves to ``when`` (none for ``inf``). Called only when that
        differs from ``_wake_at``: kept while the deadline holds, a wait per reply
        chunk must not cost a timer each."""
        if self._wake is not None:
            self._wake.cancel()
        self._wake = None if when == math.inf else self._clock.call_at(when, self._deadline)
        self._wake_at = when

    def _deadline(self) -> None:
        # spent: a loop may run a timer a little early, and the next wait on the same
        # deadline needs a timer of its own
        self._wake = None
        self._wake_at = math.inf
        self._signal()
