"""gateway.pending_ends: an end the store missed is retried until the store answers."""

from __future__ import annotations

import asyncio

from duplex.errors import DuplexError, LeaseLost, StoreUnavailable
from gateway.pending_ends import PendingEnds
from gateway.session.journal import Ownership

OWNED = Ownership("sess_a", "host:1:ab", 3)


class Store:
    """close_session answers with ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: bool | DuplexError) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, int, str]] = []
        self.called = asyncio.Event()

    async def close_session(self, session_id: str, owner: str, incarnation: int, *,
                            state: str = "closed") -> bool:
        self.calls.append((session_id, owner, incarnation, state))
        self.called.set()
        answer = self.answers.pop(0)
        if isinstance(answer, DuplexError):
            raise answer
        return answer


def ends(store: Store) -> PendingEnds:
    return PendingEnds(store, first_retry_s=0.0, max_retry_s=0.0)  # type: ignore[arg-type]


async def settled(pending: PendingEnds) -> None:
    for _ in range(1000):  # retries run on the loop: a bounded wait for them
        if "sess_a" not in pending:
            return
        await asyncio.sleep(0)
    raise AssertionError("the retry never settled")


async def test_an_end_is_retried_until_the_store_answers() -> None:
    store = Store(StoreUnavailable("away"), StoreUnavailable("away"), True)
    pending = ends(store)
    pending.keep(OWNED, "closed")
    assert "sess_a" in pending and len(pending) == 1
    await settled(pending)
    assert store.calls == [("sess_a", "host:1:ab", 3, "closed")] * 3
    assert len(pending) == 0


async def test_an_end_already_made_or_a_lease_held_elsewhere_ends_the_retry() -> None:
    for answer in (False, LeaseLost("lease is held by other#4")):
        store = Store(answer)
        pending = ends(store)
        pending.keep(OWNED, "expired")
        await settled(pending)
        assert store.calls == [("sess_a", "host:1:ab", 3, "expired")]


async def test_an_end_is_kept_once() -> None:
    store = Store(StoreUnavailable("away"), True)
    pending = ends(store)
    pending.keep(OWNED, "closed")
    pending.keep(OWNED, "closed")
    await settled(pending)
    assert len(store.calls) == 2


async def test_a_stopping_process_tries_each_end_once_more() -> None:
    store = Store(StoreUnavailable("away"))
    pending = PendingEnds(store, first_retry_s=3600.0)  # type: ignore[arg-type]
    pending.keep(OWNED, "closed")
    await pending.stop()
    assert store.calls == [("sess_a", "host:1:ab", 3, "closed")]
    assert "sess_a" not in pending
