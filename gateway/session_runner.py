"""One runner per session: its mailbox, its TaskGroup, and the I/O its core asks for.

The worker takes one mailbox item at a time (control first, I7), feeds the
sans-I/O core, then executes the core's effects in order: journal-and-send
events, stage submits and aborts, history writes. The pacer releases reply
audio at most ``lead_ms`` ahead of real time; a cancel purges whatever of the
old epoch it still holds, so none of it reaches the client after the
``response.done{cancelled}`` (I2).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from duplex import commands as c
from duplex import effects as fx
from duplex.errors import CapacityError, DuplexError, SessionStateError, StoreUnavailable
from duplex.events import ServerEvent, event
from duplex.fence import Fence, is_current_epoch
from duplex.pacing import Pacer
from duplex.session import SessionCore, apply_command
from duplex.store.base import SessionStore
from gateway.audio_io import AudioIO
from gateway.emitter import Emitter
from gateway.mailbox import Lane, Mailbox
from gateway.metrics import Metrics
from orchestrator.duplex import DuplexOrchestrator, request_id
from orchestrator.engine import StageOutput
from plugins import base as pb

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Delta:
    fence: Fence  # the stage request's fence
    delta: pb.Delta


@dataclass(frozen=True, slots=True)
class _Failure:
    fence: Fence
    message: str


@dataclass(frozen=True, slots=True)
class _ClientError:
    error: DuplexError


@dataclass(frozen=True, slots=True)
class _Close:
    reason: str


@dataclass(frozen=True, slots=True)
class RunnerLimits:
    lead_ms: float = 500.0
    max_pending_commands: int = 512
    max_pending_events: int = 256
    max_pending_audio: int = 4096
    journal_max: int = 20000


class SessionRunner:
    def __init__(self, core: SessionCore, emitter: Emitter, store: SessionStore,
                 orchestrator: DuplexOrchestrator, plugin: pb.DuplexModelPlugin,
                 metrics: Metrics, limits: RunnerLimits) -> None:
        self.core = core
        self.emitter = emitter
        self.store = store
        self.orch = orchestrator
        self.plugin = plugin
        self.metrics = metrics
        self.limits = limits
        caps = plugin.capabilities
        self.audio = AudioIO(caps.input_rate, caps.output_rate)
        self.audio.configure(core.config.input_format, core.config.output_format)
        self.vad: pb.VoiceActivityDetector | None = None
        self._vad_config = core.config.turn_detection
        if self._vad_config is not None:
            self.vad = plugin.create_vad(self._vad_config)
        self.mailbox = Mailbox({Lane.CONTROL: limits.max_pending_commands,
                                Lane.EVENTS: limits.max_pending_events,
                                Lane.MEDIA: limits.max_pending_audio})
        self._audio_lane: deque[_Delta] = deque()
        self._audio_ready = asyncio.Event()
        self._pacer = Pacer(limits.lead_ms)
        self._unit: list[np.ndarray[Any, np.dtype[np.int16]]] = []
        self._unit_samples = caps.input_rate * caps.unit_ms // 1000
        self._prefix: deque[np.ndarray[Any, np.dtype[np.int16]]] = deque()
        self._turn_ended_at: float | None = None
        self.closed = asyncio.Event()
        self.on_closed: list[Any] = []

    @property
    def session_id(self) -> str:
        return self.core.fence.session_id

    # -- inputs from the socket and the orchestrator ----------------------------------

    def submit(self, cmd: c.Command) -> None:
        """Queue a client command; raises ``CapacityError`` when the session is flooded."""
        self.mailbox.put(Lane.CONTROL, cmd)

    def report(self, error: DuplexError) -> None:
        """Queue an error for the client, in order with the events before it."""
        try:
            self.mailbox.put(Lane.CONTROL, _ClientError(error))
        except CapacityError:
            log.warning("session %s: dropped error %s (mailbox full)", self.session_id,
                        error.code)

    def request_close(self, reason: str) -> None:
        self.mailbox._lanes[Lane.CONTROL].append(_Close(reason))  # never refused
        self.mailbox._ready.set()

    def current_fence(self) -> Fence:
        return self.core.fence

    def on_stage_output(self, out: StageOutput) -> None:
        assert out.result is not None
        for delta in self.plugin.project(out.stage, out.result.payload):
            item = _Delta(out.fence, delta)
            if isinstance(delta, pb.Transcript):
                self._put(Lane.EVENTS, item)
            elif len(self._audio_lane) < self.limits.max_pending_audio:
                self._audio_lane.append(item)
                self._audio_ready.set()
            else:
                self._put(Lane.CONTROL, _Failure(out.fence, "output_backpressure"))

    def on_stage_failure(self, fence: Fence, message: str) -> None:
        self._put(Lane.CONTROL, _Failure(fence, message))

    def _put(self, lane: Lane, item: Any) -> None:
        try:
            self.mailbox.put(lane, item)
        except CapacityError:
            log.warning("session %s: %s lane full; dropping", self.session_id, lane.name)

    # -- the session's task group ---------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            pacer = tg.create_task(self._pace(), name=f"pace-{self.session_id}")
            try:
                await self._work()
            finally:
                pacer.cancel()

    async def _work(self) -> None:
        while not self.closed.is_set():
            item = await self.mailbox.get()
            try:
                await self._handle(item)
            except DuplexError as exc:
                if isinstance(item, c.Command) and exc.event_id is None:
                    exc.event_id = item.event_id
                await self._publish_error(exc)

    async def _publish_error(self, exc: DuplexError) -> None:
        await self.emitter.publish([event(ServerEvent.ERROR, error=exc.to_wire())])

    async def _handle(self, item: Any) -> None:
        match item:
            case c.AppendAudio():
                await self._append(item.audio)
            case c.UpdateSession():
                apply_command(self.core, item)
                self._reconfigure()
            case c.AckEvents():
                await self.store.trim_journal(self.session_id, min(
                    item.server_event_seq, self.emitter.last_seq))
                return
            case c.CloseSession():
                await self.shutdown(item.reason)
                return
            case c.ResumeSession():
                raise SessionStateError("session.resume must be the first message",
                                        code="invalid_session_resume")
            case c.Command():
                apply_command(self.core, item)
            case _ClientError():
                await self._publish_error(item.error)
                return
            case _Close():
                await self.shutdown(item.reason)
                return
            case _Failure():
                self.core.stage_failed(item.fence.with_turn(self.core.fence.turn_id),
                                       item.message)
            case _Delta():
                self._feed_delta(item)
        await self._run_effects()

    def _feed_delta(self, item: _Delta) -> None:
        delta = item.delta
        match delta:
            case pb.Transcript():
                self.core.transcript(delta.item_id, delta.text)
            case pb.Speech():
                fence = item.fence.with_turn(delta.turn_id)
                pcm = self.audio.encode(delta.pcm)
                ms = 1000.0 * len(delta.pcm) / self.plugin.capabilities.output_rate
                first = self.core.response is not None and not self.core.response.ledger.marks
                if self.core.assistant_audio(fence, base64.b64encode(pcm).decode(), ms,
                                             delta.text) and first:
                    self._observe_first_audio()
            case pb.TextOnly():
                self.core.assistant_audio(item.fence.with_turn(delta.turn_id), "", 0.0,
                                          delta.text)
            case pb.EndOfResponse():
                self.core.response_end(item.fence.with_turn(delta.turn_id))

    def _observe_first_audio(self) -> None:
        if self._turn_ended_at is not None:
            self.metrics.first_audio.observe(time.monotonic() - self._turn_ended_at)
            self._turn_ended_at = None

    def _reconfigure(self) -> None:
        cfg = self.core.config
        self.audio.configure(cfg.input_format, cfg.output_format)
        if cfg.turn_detection != self._vad_config:
            self._vad_config = cfg.turn_detection
            self.vad = (self.plugin.create_vad(cfg.turn_detection)
                        if cfg.turn_detection is not None else None)

    # -- user audio ----------------------------------------------------------------

    async def _append(self, data: bytes) -> None:
        pcm = self.audio.decode(data)
        if len(pcm) == 0:
            return
        self.core.audio_appended(1000.0 * len(pcm) / self.plugin.capabilities.input_rate)
        if self.vad is not None:
            for vad_event in self.vad.process(pcm):
                if vad_event.started:
                    self.core.speech_started(vad_event.audio_ms)
                else:
                    self.core.speech_stopped(vad_event.audio_ms)
                await self._run_effects()
        self._remember_prefix(pcm)
        self._unit.append(pcm)
        if sum(len(p) for p in self._unit) >= self._unit_samples:
            await self._flush_unit()

    def _remember_prefix(self, pcm: np.ndarray[Any, np.dtype[np.int16]]) -> None:
        td = self.core.config.turn_detection
        keep = self.plugin.capabilities.input_rate * (td.prefix_padding_ms if td else 300) // 1000
        self._prefix.append(pcm)
        while sum(len(p) for p in self._prefix) - len(self._prefix[0]) >= keep:
            self._prefix.popleft()

    async def _flush_unit(self) -> None:
        if not self._unit:
            return
        pcm = np.concatenate(self._unit)
        self._unit = []
        await self._stage0(pb.AudioUnit(pcm))

    async def _stage0(self, payload: Any) -> None:
        await self._ensure_thinker()
        await self.orch.submit(0, self.core.fence, payload)

    async def _ensure_thinker(self) -> None:
        """The epoch's thinker request starts from the honest history (I6)."""
        if self.orch.is_live(request_id(self.core.fence, 1)):
            return
        history = tuple(pb.HistoryItem(role, text) for role, text in self.core.history()
                        if text)
        ctx = self.plugin.context(self.core.config.instructions, history)
        await self.orch.submit(1, self.core.fence, ctx)

    # -- effects -------------------------------------------------------------------

    async def _run_effects(self) -> None:
        batch: list[dict[str, Any]] = []
        for effect in self.core.effects():
            if isinstance(effect, fx.Emit):
                batch.append(effect.event)
                continue
            if batch:
                await self.emitter.publish(batch)
                batch = []
            await self._execute(effect)
        if batch:
            await self.emitter.publish(batch)

    async def _execute(self, effect: fx.Effect) -> None:
        sid, owner, inc = self.session_id, self.emitter.owner, self.emitter.incarnation
        match effect:
            case fx.CommitAudio():
                await self._flush_unit()
                await self._stage0(pb.CommitTurn(effect.fence.turn_id, effect.item_id,
                                                 effect.respond))
                self._turn_ended_at = time.monotonic()
            case fx.DiscardAudio():
                self._unit = []
                if self.orch.is_live(request_id(self.core.fence, 0)):
                    await self._stage0(pb.DiscardAudio())
            case fx.StartResponse():
                await self._ensure_thinker()
                await self.orch.submit(1, self.core.fence, pb.Respond(
                    effect.fence.turn_id, effect.response_id, effect.instructions))
                self._turn_ended_at = time.monotonic()
            case fx.AbortEpoch():
                await self._abort_epoch(effect.cancelled)
            case fx.SaveItem():
                await self.store.history_append(sid, owner, inc, effect.item_id,
                                                json.dumps(effect.item), effect.previous_item_id)
            case fx.ForgetItem():
                await self.store.history_delete(sid, owner, inc, effect.item_id)
            case fx.SaveConfig():
                pass

    async def _abort_epoch(self, cancelled: Fence) -> None:
        await self.orch.abort_epoch(cancelled)
        live = self.core.fence
        self._audio_lane = deque(d for d in self._audio_lane if is_current_epoch(live, d.fence))
        self.mailbox.purge(Lane.MEDIA, lambda d: is_current_epoch(live, d.fence))
        self._pacer.reset()
        self.audio.reset_output()
        self._audio_ready.set()  # wake the pacer: what it waits on may be gone
        try:
            await self.store.bump_epoch(self.session_id, self.emitter.owner,
                                        self.emitter.incarnation, cancelled.epoch)
        except StoreUnavailable as exc:
            log.warning("session %s: epoch bump not persisted: %s", self.session_id, exc)
        if self._prefix and not self.core.closed:
            await self._stage0(pb.AudioUnit(np.concatenate(list(self._prefix))))

    # -- pacing --------------------------------------------------------------------

    async def _pace(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._audio_lane:
                self._audio_ready.clear()
                await self._audio_ready.wait()
            item = self._audio_lane[0]
            delta = item.delta
            if isinstance(delta, pb.Speech):
                key = (item.fence.epoch, delta.turn_id)
                wait = self._pacer.due(key, loop.time()) - loop.time()
                if wait > 0:
                    self._audio_ready.clear()
                    try:
                        await asyncio.wait_for(self._audio_ready.wait(), wait)
                    except TimeoutError:
                        pass
                    continue  # re-check: a cancel may have purged the lane
                ms = 1000.0 * len(delta.pcm) / self.plugin.capabilities.output_rate
                self._pacer.released(key, loop.time(), ms)
            self._audio_lane.popleft()
            self._put(Lane.MEDIA, item)

    # -- the end ---------------------------------------------------------------------

    async def shutdown(self, reason: str, *, terminal: ServerEvent = ServerEvent.SESSION_CLOSED,
                       ) -> None:
        """Stage cleanup first, then exactly one terminal event (I5)."""
        if self.closed.is_set():
            return
        self.core.close(reason)
        await self._run_effects()
        await self.orch.detach(self.core.fence)
        await self.emitter.publish([event(terminal, reason=reason)])
        try:
            await self.store.close_session(
                self.session_id, self.emitter.owner, self.emitter.incarnation,
                state="expired" if terminal is ServerEvent.SESSION_EXPIRED else "closed")
        except StoreUnavailable as exc:
            log.warning("session %s: close not persisted: %s", self.session_id, exc)
        self.closed.set()
        for callback in self.on_closed:
            callback(self)
