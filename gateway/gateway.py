"""Process-wide state: the store, the plugin, the orchestrator and the sessions.

Every process runs the same housekeeping: an owner heartbeat (so others can
tell it is alive) and a reaper whose claims Redis decides atomically. Sessions
run in the gateway's task group, not the socket's: a dropped socket detaches
the session, which goes on generating and journaling until it is resumed or
its grace runs out.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import time
from collections import Counter

from duplex.abilities import ModelAbilities
from duplex.attach import check_cursor, reaped_terminal
from duplex.close_codes import CloseCode
from duplex.config import SessionConfig
from duplex.conversation import ConversationLimits, ItemBudget
from duplex.errors import CapacityError, DuplexError, InvalidRequest, SessionStateError
from duplex.fence import Fence
from duplex.journal import ReplayVerdict
from duplex.session import SessionCore
from duplex.store.base import SEQ_PLACEHOLDER, SessionRecord
from duplex.store.client import connect
from duplex.store.redis_store import RedisSessionStore
from duplex.store.supervisor import Supervisor
from engines import build_engine
from engines.base import StageEngine
from engines.chat_server import ChatServerEngine
from gateway.config import GatewayConfig
from gateway.heap import PauseTimer
from gateway.metrics import Metrics
from gateway.pending_ends import PendingEnds
from gateway.session.attachment import dumps
from gateway.session.clock import Clock, LoopClock
from gateway.session.items import SessionLimits
from gateway.session.journal import Journal, JournalLimits, Ownership
from gateway.session.machine import store_full_error
from gateway.session.restore import core_from_record, unfinished_response
from gateway.session.runner import SessionRunner
from gateway.session_orchestrator import DuplexOrchestrator, session_of
from gateway.store_watch import StoreWatch
from orchestrator.base import StagePool
from plugins.base import DuplexModelPlugin
from plugins.registry import load_plugin

log = logging.getLogger("duplex_gateway")

OWNER_TTL_FACTOR = 3  # an owner is dead after missing this many heartbeats
LOADING = "loading: "  # readiness's reason while the plugin loads, before its step


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def journal_max_bytes(config: GatewayConfig) -> int:
    """The journal's half of a session's share of the store (the config and the
    conversation have the other: ``duplex.conversation``), or less with
    ``--resume-replay-max-bytes``."""
    share = config.session_max_store_bytes
    return min(config.resume_replay_max_bytes, share - share // 2)


def _ended(sid: str) -> SessionStateError:
    return SessionStateError(f"session {sid[:40]} has ended or never existed",
                             code="session_resume_expired")


class ResyncRequired(DuplexError):
    """The journal no longer holds the events after the client's cursor."""

    default_code = "journal_gap"

    def __init__(self, oldest: int | None, last: int) -> None:
        super().__init__("the journal no longer covers this cursor; start a new session")
        self.oldest = oldest
        self.last = last


class Gateway:
    def __init__(self, config: GatewayConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or LoopClock()  # the sessions' (a test may drive its own)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.metrics = Metrics()
        # the store bounds each call and batch itself: no per-command socket timeout
        self.store = RedisSessionStore(connect(config.redis_url or "unix:///nonexistent",
                                               timeout_s=config.store_timeout_s,
                                               socket_timeouts=False),
                                       timeout_s=config.store_timeout_s,
                                       replica_acks=config.replica_acks,
                                       ended_ttl_s=config.ended_session_retention_s,
                                       retained_max_bytes=config.retained_max_store_bytes)
        self.plugin: DuplexModelPlugin | None = None
        self.orchestrator: DuplexOrchestrator | None = None
        self.engines: list[StageEngine] = []
        self.runners: dict[str, SessionRunner] = {}
        self.pending_ends = PendingEnds(self.store)  # ended here, not yet in the store
        self.not_ready = "starting"
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._restoring: dict[str, asyncio.Future[SessionRunner]] = {}
        self._by_address: Counter[str] = Counter()  # open sessions per client address
        self.store_watch = StoreWatch(self.store, min(config.reaper_interval_s, 1.0))
        self._gc_pauses = PauseTimer(self.metrics.gc_pauses)

    @property
    def conversation_limits(self) -> ConversationLimits:
        return ConversationLimits(self.config.max_conversation_items,
                                  self.config.max_conversation_bytes,
                                  self.config.session_max_store_bytes // 2)

    @property
    def owner_ttl_s(self) -> float:
        return OWNER_TTL_FACTOR * self.config.reaper_interval_s

    # -- start and stop ----------------------------------------------------------

    async def start(self, tg: asyncio.TaskGroup) -> None:
        """Start at once; the plugin loads in the background (a minute for the
        cascade's models), so ``/healthz`` and ``/readyz`` answer from the first
        second, the latter with the loading step."""
        self._tg = tg
        self._gc_pauses.install()
        self._tasks.append(tg.create_task(self.store_watch.run(), name="store-watch"))
        self._tasks.append(tg.create_task(self._load(tg), name="load"))

    async def _load(self, tg: asyncio.TaskGroup) -> None:
        try:
            await self.store.ping()
        except DuplexError as exc:
            log.error("Redis at %s is unreachable: %s (not ready until it answers)",
                      self.config.redis_url, exc)
        self.not_ready = "loading plugin"
        try:
            plugin = load_plugin(self.config.plugin)
            await asyncio.to_thread(plugin.load, self._progress)
            self.engines = [build_engine(i, stage) for i, stage in enumerate(plugin.stages())]
        except Exception as exc:
            self.not_ready = f"plugin {self.config.plugin!r} failed to load: {exc}"
            log.error("%s", self.not_ready)
            return
        self.plugin = plugin
        names = plugin.capabilities.stage_names
        for engine in self.engines:
            guesses = getattr(engine, "guesses", None)  # engines that run guesses count them
            if guesses is not None:
                self.metrics.guesses.watch(engine.name, guesses)
            if isinstance(engine, ChatServerEngine):  # on a model server apart
                self.metrics.model_servers.watch(engine)
        for server in getattr(plugin, "model_servers", list)():  # the plugin's own clients
            self.metrics.model_servers.watch(server)
        pools = [StagePool([engine]) for engine in self.engines]

        def observe(stage: int, seconds: float, request: str) -> None:
            self.metrics.stage_latency.labels(names[stage]).observe(seconds)
            runner = self.runners.get(session_of(request))
            if runner is not None:
                runner.note_stage_latency(stage, seconds)

        self.orchestrator = DuplexOrchestrator(pools, observe)
        self._tasks.append(tg.create_task(self.orchestrator.run(), name="orchestrator"))
        self._tasks.append(tg.create_task(self._housekeeping(), name="housekeeping"))
        self.not_ready = ""

    async def stop(self) -> None:
        """Detach every session (they stay resumable) and step down as owner."""
        for runner in list(self.runners.values()):
            attachment = runner.let_go()
            if attachment is not None:
                await attachment.end(CloseCode.SERVICE_RESTART, "gateway restarting")
                try:
                    await self.store.detach(runner.session_id, attachment.generation,
                                            self.clock.wall())
                except DuplexError as exc:
                    log.warning("session %s: detach at shutdown failed: %s",
                                runner.session_id, exc)
            await runner.abandon()
        await self.pending_ends.stop()
        try:
            await self.store.retire_owner(self.owner)
        except DuplexError as exc:
            log.warning("could not retire owner %s: %s", self.owner, exc)
        for task in self._tasks:
            task.cancel()
        self._gc_pauses.remove()
        await self.store.close()

    def _progress(self, step: str) -> None:
        """Plugin loading progress (called from the loading thread)."""
        self.not_ready = LOADING + step
        log.info("%s", step)

    async def readiness(self, *, fresh: bool = True) -> str:
        """Empty when ready, else why not. ``fresh=False`` trusts the store check of
        the last housekeeping tick (new connections must not each ping Redis)."""
        if self.not_ready:
            return self.not_ready
        for engine in self.engines:
            why = engine.readiness()
            if why:
                return why
        if not fresh and self.store_watch.answered_within(2 * self.config.reaper_interval_s):
            return ""
        try:
            await self.store.ping()
        except DuplexError as exc:
            return f"store unreachable: {exc.message}"
        self.store_watch.answered()
        return ""

    def health(self) -> str:
        """Why ``/healthz`` fails, empty while it passes: only a store outage longer
        than ``--store-down-unhealthy-s``, which restarting the process may cure."""
        return self.store_watch.unhealthy(self.config.store_down_unhealthy_s)

    def watch_store_server(self, supervisor: Supervisor) -> None:
        """Count the embedded server's restarts (``duplex_store_restarts_total``)."""
        supervisor.on_restart.append(lambda _: self.metrics.store_restarts.inc())

    # -- housekeeping ------------------------------------------------------------

    async def _housekeeping(self) -> None:
        interval = self.config.reaper_interval_s
        while True:
            try:
                now = time.time()
                await self.store.heartbeat_owner(self.owner, now, self.owner_ttl_s,
                                                 self.config.advertise_url or "")
                self.store_watch.answered()
                await self._reap(now)
            except DuplexError as exc:
                self._housekeeping_failed(exc)
            await asyncio.sleep(interval)

    def _housekeeping_failed(self, exc: DuplexError) -> None:
        # Loading a model holds the GIL for seconds at a time, so a Redis answer can
        # wait past --store-timeout-s while the engines start: expected, not news.
        # /readyz still names a store that stays away.
        if self.starting:
            log.info("housekeeping: %s (while the models load)", exc)
        else:
            log.warning("housekeeping: %s", exc)

    @property
    def starting(self) -> bool:
        """The plugin or one of its engines is still loading."""
        return bool(self.not_ready) or any(engine.readiness() for engine in self.engines)

    async def _reap(self, now: float) -> None:
        for sid, reason, owner in await self.store.claim_expired(self.owner, now):
            runner = self.runners.get(sid)
            if runner is not None and owner == self.owner:
                runner.request_expire(reason)  # aborts its stages, then session.expired
                continue
            if sid in self.pending_ends:
                continue  # ended here already: its retried close ends our claim too
            terminal = dumps(reaped_terminal(sid, reason))
            assert SEQ_PLACEHOLDER in terminal
            await self.store.finish_expiry(sid, self.owner, terminal)
            log.info("session %s of dead owner %s expired (%s)", sid, owner, reason)

    # -- sessions ----------------------------------------------------------------

    def _runner(self, record: SessionRecord, core: SessionCore, *, beta: bool) -> SessionRunner:
        assert self.plugin is not None and self.orchestrator is not None
        caps = self.plugin.capabilities
        core.abilities = ModelAbilities(caps.tools, caps.response_input, caps.output_modalities)
        cfg = self.config
        journal = Journal(self.store, Ownership(record.session_id, self.owner, record.incarnation),
                          last_seq=record.last_seq, epoch=record.epoch, beta=beta,
                          limits=JournalLimits(cfg.journal_max_events, cfg.resume_replay_ttl_s,
                                               journal_max_bytes(cfg)),
                          metrics=self.metrics, clock=self.clock)
        limits = SessionLimits(lead_ms=cfg.output_lead_ms,
                               max_pending_commands=cfg.max_pending_commands,
                               max_session_s=cfg.max_session_s or None)
        runner = SessionRunner(core, journal, self.orchestrator, self.plugin, self.metrics,
                               limits, self.clock)
        runner.opened_at = record.created_at
        runner.machine.store_full = self.store_watch.full
        self.orchestrator.attach(record.session_id, runner)
        self.runners[record.session_id] = runner
        self.metrics.sessions.inc()
        runner.on_closed.append(self._forget)
        assert self._tg is not None
        runner.task = self._tg.create_task(self._run(runner), name=record.session_id)
        return runner

    async def _run(self, runner: SessionRunner) -> None:
        try:
            await runner.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # one session's bug must not take the process down
            log.exception("session %s failed", runner.session_id)
            await runner.abandon(failed=True)

    def _forget(self, runner: SessionRunner) -> None:
        if runner.unsaved_end is not None:  # kept before it leaves runners: no gap
            self.pending_ends.keep(runner.outbox.journal.ownership, runner.unsaved_end)
        if self.runners.pop(runner.session_id, None) is not None:
            self.metrics.sessions.dec()

    async def open_session(self, *, beta: bool, address: str | None = None,
                           transcription: bool = False) -> tuple[SessionRunner, str]:
        """Admit a new session (raises ``CapacityError``); returns it and its resume token.
        ``address``: the client's, for ``--max-sessions-per-address``; ``transcription``:
        a transcription session (``?intent=transcription``)."""
        sid = "sess_" + secrets.token_urlsafe(18)
        token = secrets.token_urlsafe(32)
        cfg = self.config
        limit = cfg.max_sessions_per_address
        if address is not None and limit and self._by_address[address] >= limit:
            raise CapacityError(f"{limit} sessions are open from this address already, the "
                                "most this gateway allows one address",
                                code="resource_exhausted")
        if self.store_watch.full():
            raise store_full_error()
        config = SessionConfig(kind="transcription" if transcription else "realtime")
        record = await self.store.open_session(
            sid, owner=self.owner, token_digest=token_digest(token),
            config=json.dumps(config.wire(sid)) if transcription else "{}",
            now=self.clock.wall(), max_sessions=cfg.max_sessions,
            max_sessions_per_owner=cfg.max_sessions_per_process, idle_ttl_s=cfg.idle_ttl_s or None,
            grace_s=cfg.disconnect_grace_s)
        core = SessionCore(Fence(sid, record.incarnation, 0, 0), config, beta=beta,
                           budget=ItemBudget(self.conversation_limits))
        self.metrics.sessions_opened.inc()
        runner = self._runner(record, core, beta=beta)
        if address is not None:
            self._by_address[address] += 1
            runner.on_closed.append(lambda _: self._left(address))
        return runner, token

    def _left(self, address: str) -> None:
        self._by_address[address] -= 1
        if self._by_address[address] <= 0:
            del self._by_address[address]  # bounded by the live sessions (I8)

    async def owner_elsewhere(self, sid: str) -> str | None:
        """The address of another live process that owns ``sid``: a resume is served
        through it (``gateway.owner_relay``). None: serve it here."""
        # Redis is read even for a session served here: a resume of an unknown id
        # must take as long as one with a wrong token (gateway.auth.resume_refused).
        record = await self.store.get(sid)
        if (sid in self.runners or record is None or record.state != "open"
                or record.owner == self.owner):
            return None
        return await self.store.owner_address(record.owner, time.time())

    async def resume_session(self, sid: str, token: str, cursor: int, *,
                             beta: bool) -> tuple[SessionRunner, str, int]:
        """Check the token and the cursor, take the session over if its owner is gone,
        then move the attachment on by one (compare-and-swap); returns the runner,
        the rotated token and the new attachment generation.

        Everything that can refuse the resume is checked before the swap, so a
        refused resume leaves the session exactly as it was.
        """
        record = await self.store.get(sid)
        if record is None or record.state != "open":
            raise _ended(sid)
        presented = token_digest(token)
        if not (hmac.compare_digest(presented, record.resume_token_digest)
                or (record.recovery_token_digest
                    and hmac.compare_digest(presented, record.recovery_token_digest))):
            raise InvalidRequest("resume_token does not match", code="invalid_resume_token",
                                 param="resume_token")
        oldest, last = await self.store.journal_bounds(sid)
        if check_cursor(cursor, oldest, last).verdict is ReplayVerdict.JOURNAL_GAP:
            raise ResyncRequired(oldest, last)
        runner = self.runners.get(sid)
        if sid in self.pending_ends or (runner is not None and runner.ending):
            # Ended here, and the store may not know yet (issue 27). A runner whose
            # client hangs up after this is refused by its worker instead.
            raise _ended(sid)
        if runner is None or runner.closed.is_set():
            runner = await self._restore(sid, beta=beta)
            record = runner.record or record
        new_token = secrets.token_urlsafe(32)
        try:
            record = await self.store.resume(sid, presented, record.generation,
                                             token_digest(new_token), self.owner, self.clock.wall())
        except SessionStateError as exc:
            if exc.code in ("session_closed", "session_not_found"):
                raise _ended(sid) from exc  # the reaper got there first
            raise
        return runner, new_token, record.generation

    async def _restore(self, sid: str, *, beta: bool) -> SessionRunner:
        pending = self._restoring.get(sid)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[SessionRunner] = asyncio.get_running_loop().create_future()
        self._restoring[sid] = future
        try:
            record = await self._take_over(sid)
            history = await self.store.history(sid)
            journal = await self.store.read_journal(sid, max(0, record.last_seq - 1000), 1000)
            core = core_from_record(record, history, beta=beta,
                                    limits=self.conversation_limits)
            runner = self._runner(record, core, beta=beta)
            runner.record = record
            runner.recover(unfinished_response(journal))
            log.info("took session %s over (incarnation %d)", sid, record.incarnation)
            future.set_result(runner)
            return runner
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._restoring[sid]

    async def _take_over(self, sid: str) -> SessionRecord:
        """Wait (bounded) for a crashed owner's heartbeat to lapse, then take over."""
        deadline = time.monotonic() + self.owner_ttl_s + self.config.reaper_interval_s
        while True:
            try:
                return await self.store.take_over(sid, self.owner, self.clock.wall())
            except SessionStateError as exc:
                if exc.code != "session_owned_elsewhere" or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(self.config.reaper_interval_s / 4)
