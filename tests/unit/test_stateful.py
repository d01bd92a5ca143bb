"""Stateful property tests: the session core's fences and epochs (I1, I2) and leases (I3)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from duplex import commands as c
from duplex import effects as fx
from duplex import lease as ls
from duplex.errors import DuplexError, LeaseLost, SessionStateError
from duplex.events import ServerEvent as E
from duplex.fence import Fence
from duplex.session import MIN_COMMIT_MS, SessionCore
from duplex.turns import TurnState

SETTINGS = settings(max_examples=200, stateful_step_count=50, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

DELTAS = {E.AUDIO_DELTA.value, E.AUDIO_TRANSCRIPT_DELTA.value, E.TEXT_DELTA.value}
CANCEL_CODES = {"response_cancel_not_active"}


class SessionCoreMachine(RuleBasedStateMachine):
    """Random inputs to one SessionCore; every step's effects are checked."""

    def __init__(self) -> None:
        super().__init__()
        self.core = SessionCore(Fence("s1", 1, 0, 0))
        self.rank = self.core.fence.rank
        self.seen_fences: list[Fence] = [self.core.fence]
        self.fence_of: dict[str, Fence] = {}  # response id → its fence
        self.open_ids: set[str] = set()  # response.created without response.done yet
        self.done_ids: set[str] = set()
        self.vad_ms = 0
        self.total_aborts = 0

    # -- the step check --------------------------------------------------------------

    def step(self, action: Any, *, bumps: int, codes: frozenset[str] = frozenset()) -> bool:
        """Run ``action``; assert its effects; ``bumps`` is the expected epoch delta."""
        epoch = self.core.fence.epoch
        active = self.core.response
        try:
            action()
            raised = None
        except DuplexError as exc:
            raised = exc
        effects = self.core.effects()
        if raised is not None:
            assert raised.code in codes, raised
            assert effects == [], effects  # a refused input has no effects
            assert self.core.fence.epoch == epoch
            return False

        aborts = [e for e in effects if isinstance(e, fx.AbortEpoch)]
        # I2: an accepted cancel bumps the epoch exactly once, a refused one never
        assert len(aborts) == bumps, (bumps, effects)
        assert self.core.fence.epoch - epoch == bumps
        for a in aborts:
            assert a.current.epoch == a.cancelled.epoch + 1
            assert a.cancelled.rank < a.current.rank
            assert active is not None and a.cancelled.epoch == active.fence.epoch
        self.total_aborts += len(aborts)

        for e in effects:
            if not isinstance(e, fx.Emit):
                continue
            kind, rid = e.event["type"], e.event.get("response_id")
            if kind == E.RESPONSE_CREATED:
                new = e.event["response"]["id"]
                assert not self.open_ids, "a second response while one is active"
                self.open_ids.add(new)
            elif kind == E.RESPONSE_DONE:
                done = e.event["response"]["id"]
                assert done in self.open_ids
                self.open_ids.discard(done)
                self.done_ids.add(done)
            elif kind in DELTAS:
                # I1/I2: no delta for a finished response, nor for an older epoch
                assert rid not in self.done_ids
                assert rid in self.open_ids
                assert active is not None and rid == active.id
                assert active.fence.epoch == self.core.fence.epoch
        if self.core.response is not None:
            self.fence_of[self.core.response.id] = self.core.response.fence
            if self.core.response.fence not in self.seen_fences:
                self.seen_fences.append(self.core.response.fence)
        return True

    # -- rules ---------------------------------------------------------------------

    @rule(ms=st.sampled_from([20.0, 60.0, 100.0, 240.0]))
    def append_audio(self, ms: float) -> None:
        if self.core.closed:
            self.step(lambda: self.core.audio_appended(ms), bumps=0,
                      codes=frozenset({"session_closed"}))
        else:
            before = self.core.input.ms
            self.step(lambda: self.core.audio_appended(ms), bumps=0)
            assert self.core.input.ms == before + ms

    @rule()
    def speech_started(self) -> None:
        td = self.core.config.turn_detection
        barge = (self.core.response is not None and not self.core.closed
                 and td is not None and td.interrupt_response)
        self.vad_ms += 100
        self.step(lambda: self.core.speech_started(self.vad_ms), bumps=int(barge))
        if barge:
            assert self.core.response is None

    @rule()
    def speech_stopped(self) -> None:
        self.vad_ms += 100
        self.step(lambda: self.core.speech_stopped(self.vad_ms), bumps=0)

    @rule()
    def commit(self) -> None:
        too_small = self.core.input.ms < MIN_COMMIT_MS
        ok = self.step(lambda: self.core.commit(c.CommitInput(None)), bumps=0,
                       codes=frozenset({"input_audio_buffer_commit_empty", "session_closed"}))
        assert ok == (not too_small and not self.core.closed)

    @rule(text_only=st.booleans())
    def create_response(self, text_only: bool) -> None:
        active = self.core.response is not None
        cmd = c.CreateResponse(None, None, ("text",) if text_only else None, None, False)
        ok = self.step(lambda: self.core.create_response(cmd), bumps=0, codes=frozenset(
            {"conversation_already_has_active_response", "session_closed"}))
        assert ok == (not active and not self.core.closed)
        if ok:
            assert self.core.response is not None

    @rule(which=st.sampled_from(["none", "current", "old", "clear_output"]),
          retry=st.booleans())
    def cancel(self, which: str, retry: bool) -> None:
        r = self.core.response
        live = r is not None and not self.core.closed
        if which == "clear_output":
            self.step(self.core.clear_output_audio, bumps=int(live),
                      codes=frozenset({"session_closed"}))
            return
        rid = {"none": None, "current": r.id if r else None,
               "old": next(iter(self.done_ids), "resp_gone")}[which]
        accepted = live and (rid is None or (r is not None and rid == r.id))
        codes = frozenset(CANCEL_CODES | {"session_closed"})
        ok = self.step(lambda: self.core.cancel_response(c.CancelResponse(None, rid)),
                       bumps=int(accepted), codes=codes)
        assert ok == accepted
        if retry:  # the same cancel again must never bump a second time
            if accepted:
                assert self.core.response is None
            again = self.step(lambda: self.core.cancel_response(c.CancelResponse(None, rid)),
                              bumps=0, codes=codes)
            assert not again

    @rule(text=st.sampled_from(["", "Hi ", "there "]), ms=st.sampled_from([0.0, 40.0, 120.0]))
    def assistant_audio_current(self, text: str, ms: float) -> None:
        r = self.core.response
        fence = r.fence if r else self.core.fence
        result: list[bool] = []
        self.step(lambda: result.append(self.core.assistant_audio(fence, "AAAA", ms, text)),
                  bumps=0)
        assert result == [r is not None and not self.core.closed]

    @rule(data=st.data())
    def assistant_audio_stale(self, data: st.DataObject) -> None:
        # mostly near the live fence, where a wrong comparison would let audio through
        base = data.draw(st.sampled_from([self.core.fence, *self.seen_fences[-3:]]))
        sid, inc, epoch, turn = base.session_id, base.incarnation, base.epoch, base.turn_id
        fence = data.draw(st.sampled_from([
            base, Fence("s2", inc, epoch, turn), Fence(sid, inc + 1, epoch, turn),
            Fence(sid, inc, epoch + 1, turn), Fence(sid, inc, max(0, epoch - 1), turn),
            base.with_turn(turn + 1), base.with_turn(max(0, turn - 1)),
        ]))
        r = self.core.response
        live = r is not None and fence == r.fence and not self.core.closed
        result: list[bool] = []
        self.step(lambda: result.append(self.core.assistant_audio(fence, "AAAA", 40.0, "x")),
                  bumps=0)
        assert result == [live]

    @rule(how=st.sampled_from(["end", "fail"]), current=st.booleans(), data=st.data())
    def response_end(self, how: str, current: bool, data: st.DataObject) -> None:
        r = self.core.response
        fence = r.fence if (current and r) else data.draw(st.sampled_from(self.seen_fences))
        live = r is not None and fence == r.fence and not self.core.closed
        if how == "end":
            self.step(lambda: self.core.response_end(fence), bumps=0)
        else:
            self.step(lambda: self.core.stage_failed(fence, "boom"), bumps=0)
        assert (r is not None and r.id in self.done_ids) == live

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        ledgers = self.core.conversation.ledgers(self.core.response)
        if not ledgers:
            return
        ledger = data.draw(st.sampled_from(list(ledgers)))
        end = data.draw(st.integers(0, int(ledger.generated_ms) + 50))
        heard_before = ledger.heard_ms
        ok = self.step(
            lambda: self.core.truncate_item(c.TruncateItem(None, ledger.item_id, 0, end)),
            bumps=0, codes=frozenset({"invalid_value", "session_closed"}))
        if ok:  # I6: min wins, history never grows back
            assert ledger.heard_ms is not None and ledger.heard_ms <= end
            assert heard_before is None or ledger.heard_ms <= heard_before

    @rule(interrupt=st.booleans(), respond=st.booleans())
    def configure_vad(self, interrupt: bool, respond: bool) -> None:
        update = {"turn_detection": {"type": "server_vad", "interrupt_response": interrupt,
                                     "create_response": respond}}
        self.step(lambda: self.core.update_session(c.UpdateSession(None, update)), bumps=0,
                  codes=frozenset({"session_closed"}))

    @precondition(lambda self: len(self.done_ids) > 1)
    @rule(dice=st.integers(0, 2))
    def close(self, dice: int) -> None:
        if dice:  # keep closing rare: a closed core refuses everything after
            return
        bump = self.core.response is not None and not self.core.closed
        self.step(lambda: self.core.close("bye"), bumps=int(bump))
        assert self.core.closed

    # -- invariants --------------------------------------------------------------

    @invariant()
    def fence_never_goes_backwards(self) -> None:
        rank = self.core.fence.rank
        assert rank >= self.rank
        assert self.core.fence.session_id == "s1" and self.core.fence.incarnation == 1
        self.rank = rank

    @invariant()
    def at_most_one_active_response(self) -> None:
        assert len(self.open_ids) <= 1
        r = self.core.response
        if r is None:
            assert not self.open_ids or self.core.closed
        else:
            assert self.open_ids == {r.id}
            assert r.fence == self.core.fence  # the active response owns the live fence

    @invariant()
    def turn_state_matches_the_response(self) -> None:
        if self.core.closed:
            assert self.core.response is None
        elif self.core.response is None:
            assert self.core.turn_state in (TurnState.IDLE, TurnState.USER_SPEAKING)
        else:
            assert self.core.turn_state in (TurnState.RESPONDING, TurnState.OVERLAP)


SessionCoreMachine.TestCase.settings = SETTINGS
TestSessionCore = SessionCoreMachine.TestCase


# -- leases ---------------------------------------------------------------------------

OWNERS = ("gw-a", "gw-b", "gw-c")


class LeaseMachine(RuleBasedStateMachine):
    """Several gateway processes contend for one session's lease."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.lease = ls.new_lease("gw-a", 0.0, grace_s=10.0, idle_ttl_s=60.0)
        self.belief: dict[str, int] = {"gw-a": 1}  # what each process thinks it holds
        self.owner, self.incarnation, self.generation = "gw-a", 1, 1
        self.ended = False

    @initialize()
    def start(self) -> None:
        assert ls.renew(self.lease, "gw-a", 1, 0.0) == self.lease

    @rule(dt=st.sampled_from([0.5, 5.0, 30.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule(owner=st.sampled_from(OWNERS))
    def renew(self, owner: str) -> None:
        inc = self.belief.get(owner, 0)
        if self.ended:
            with pytest.raises(SessionStateError):
                ls.renew(self.lease, owner, inc, self.now)
        elif owner == self.owner and inc == self.incarnation:
            self.lease = ls.renew(self.lease, owner, inc, self.now)
            assert self.lease.last_activity == self.now
        else:
            with pytest.raises(LeaseLost):
                ls.renew(self.lease, owner, inc, self.now)

    @rule(owner=st.sampled_from(OWNERS), inc=st.integers(0, 6))
    def renew_with_any_token(self, owner: str, inc: int) -> None:
        if self.ended:
            return
        if owner == self.owner and inc == self.incarnation:
            self.lease = ls.renew(self.lease, owner, inc, self.now)
        else:
            with pytest.raises(LeaseLost):
                ls.renew(self.lease, owner, inc, self.now)

    @rule(owner=st.sampled_from(OWNERS))
    def take_over(self, owner: str) -> None:
        if self.ended:
            with pytest.raises(SessionStateError):
                ls.take_over(self.lease, owner, self.now)
            return
        self.lease = ls.take_over(self.lease, owner, self.now)
        self.incarnation += 1
        self.owner = owner
        self.belief[owner] = self.incarnation
        assert self.lease.incarnation == self.incarnation

    @rule(older=st.booleans())
    def detach(self, older: bool) -> None:
        before = self.lease
        generation = self.lease.generation - 1 if older else self.lease.generation
        self.lease = ls.detach(self.lease, generation, self.now)
        if older or self.ended or before.detached_at is not None:
            assert self.lease == before  # a stale or repeated detach is a no-op
        else:
            assert self.lease.detached_at == self.now

    @rule()
    def racing_resumes(self) -> None:
        seen = self.lease.generation  # both sockets read the same generation
        winners = 0
        for _ in range(2):
            try:
                self.lease = ls.resume(self.lease, seen, self.now)
                winners += 1
            except SessionStateError as exc:
                assert exc.code in ("session_resume_conflict", "session_closed")
        if self.ended:
            assert winners == 0
        else:
            assert winners == 1  # exactly one of two racing resumers wins
            self.generation += 1
            assert self.lease.attached

    @rule(expected=st.integers(0, 8))
    def resume_any(self, expected: int) -> None:
        if not self.ended and expected == self.generation:
            self.lease = ls.resume(self.lease, expected, self.now)
            self.generation += 1
        else:
            with pytest.raises(SessionStateError):
                ls.resume(self.lease, expected, self.now)

    @precondition(lambda self: not self.ended)
    @rule()
    def end(self) -> None:
        self.lease = ls.end(self.lease)
        self.generation += 1
        self.ended = True

    @invariant()
    def never_two_holders(self) -> None:
        holders = []
        for owner, inc in self.belief.items():
            try:
                ls.renew(self.lease, owner, inc, self.now)
                holders.append(owner)
            except (LeaseLost, SessionStateError):
                pass
        assert len(holders) <= 1
        if not self.ended:
            assert holders == [self.lease.owner]

    @invariant()
    def matches_the_model(self) -> None:
        assert self.lease.owner == self.owner
        assert self.lease.incarnation == self.incarnation
        assert self.lease.generation == self.generation
        assert self.lease.terminal == self.ended
        if self.ended:
            assert ls.deadline(self.lease) is None and ls.expiry(self.lease, 1e12) is None
        else:
            due = ls.deadline(self.lease)
            assert due is not None  # idle_ttl is set, so a live lease always has a deadline
            assert ls.expiry(self.lease, due) is not None
            assert ls.expiry(self.lease, due - 0.001) is None


LeaseMachine.TestCase.settings = SETTINGS
TestLease = LeaseMachine.TestCase
