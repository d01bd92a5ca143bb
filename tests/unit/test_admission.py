"""gateway.admission: which connection still sending its headers a newcomer costs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from gateway.admission import BACKLOG, Admission, backlog, open_files, open_files_limit
from gateway.config import add_serve_arguments, from_args


@dataclass(eq=False)
class Conn:
    name: str
    shed_count: int = 0

    def shed(self) -> None:
        self.shed_count += 1


@dataclass
class Process:
    """What admission reads of the process: its descriptors and its limit."""

    limit: int = 100
    others: int = 10  # descriptors that are not connections
    open: list[Conn] = field(default_factory=list)
    now: float = 0.0
    reasons: list[str] = field(default_factory=list)

    def admission(self, *, reserve: int = 20, per_address: int = 0,
                  max_connections: int = 0) -> Admission:
        return Admission(fd_reserve=reserve, per_address=per_address,
                         max_connections=max_connections, on_shed=self.reasons.append,
                         open_files=lambda: self.others + len(self.open),
                         limit=lambda: self.limit, clock=lambda: self.now)

    def accept(self, door: Admission, name: str, address: str = "10.0.0.1") -> Conn:
        conn = Conn(name)
        self.open.append(conn)
        door.arrived(conn, address, len(self.open))
        return conn

    def close_shed(self, door: Admission) -> None:
        """The loop's next turn: shed sockets are closed."""
        for conn in [c for c in self.open if c.shed_count]:
            self.open.remove(conn)
            door.gone(conn)


def test_below_the_budget_nothing_is_shed() -> None:
    proc = Process()
    door = proc.admission()
    conns = [proc.accept(door, f"c{i}") for i in range(70)]  # 100 - 20 - 10
    assert not any(c.shed_count for c in conns)
    assert len(door) == 70 and proc.reasons == []


def test_past_the_budget_the_oldest_waiting_goes_and_the_newcomer_stays() -> None:
    proc = Process()
    door = proc.admission()
    flood = [proc.accept(door, f"slow{i}") for i in range(70)]
    newcomer = proc.accept(door, "newcomer")
    assert [c.name for c in flood if c.shed_count] == ["slow0"]
    assert newcomer.shed_count == 0
    door.admitted(newcomer)  # its headers came
    proc.close_shed(door)
    later = proc.accept(door, "later")
    assert [c.name for c in flood if c.shed_count] == ["slow0", "slow1"]
    assert later.shed_count == 0 and proc.reasons == ["full", "full"]


def test_a_socket_shed_but_not_closed_yet_is_not_shed_for_twice() -> None:
    proc = Process()
    door = proc.admission()
    flood = [proc.accept(door, f"slow{i}") for i in range(70)]
    for i in range(3):  # three arrive in one turn of the loop, before any close
        proc.accept(door, f"new{i}")
    assert [c.name for c in flood if c.shed_count] == ["slow0", "slow1", "slow2"]
    assert all(c.shed_count <= 1 for c in proc.open)
    # a request on a newcomer before those close: not refused for them
    assert door.refuse_from(len(proc.open)) == len(proc.open) + 1
    proc.close_shed(door)
    assert door.refuse_from(len(proc.open)) == len(proc.open) + 1


def test_finished_connections_are_never_shed() -> None:
    proc = Process()
    door = proc.admission()
    sessions = [proc.accept(door, f"ws{i}") for i in range(70)]
    for conn in sessions:
        door.admitted(conn)
    newcomer = proc.accept(door, "newcomer")
    assert not any(c.shed_count for c in [*sessions, newcomer])
    assert door.budget(len(proc.open)) == 70
    assert door.refuse_from(len(proc.open)) == 71  # uvicorn: 503 at 71 connections


def test_max_connections_is_the_budget_when_it_is_smaller() -> None:
    proc = Process(limit=1 << 20)
    door = proc.admission(max_connections=3)
    first = [proc.accept(door, f"slow{i}") for i in range(3)]
    proc.accept(door, "newcomer")
    assert [c.name for c in first if c.shed_count] == ["slow0"]


def test_a_kept_alive_connection_waits_again_as_the_newest() -> None:
    proc = Process()
    door = proc.admission()
    kept = proc.accept(door, "kept")
    door.admitted(kept)
    rest = [proc.accept(door, f"slow{i}") for i in range(69)]
    door.waiting(kept, "10.0.0.1")  # its next request begins
    proc.accept(door, "newcomer")
    assert kept.shed_count == 0 and rest[0].shed_count == 1


def test_other_descriptors_are_recounted_at_most_once_a_second() -> None:
    proc = Process()
    door = proc.admission()
    assert door.budget(0) == 70
    proc.others = 40  # the store opened more connections, a model file
    assert door.budget(0) == 70
    proc.now = 1.0
    assert door.budget(0) == 40


def test_past_the_per_address_limit_that_address_loses_its_oldest() -> None:
    proc = Process(limit=1 << 20)
    door = proc.admission(per_address=2)
    a1, a2 = proc.accept(door, "a1", "a"), proc.accept(door, "a2", "a")
    b1 = proc.accept(door, "b1", "b")
    a3 = proc.accept(door, "a3", "a")
    assert [c.name for c in (a1, a2, b1, a3) if c.shed_count] == ["a1"]
    assert proc.reasons == ["address"]
    proc.close_shed(door)
    door.admitted(a2)
    proc.accept(door, "a4", "a")  # a3 and a4 wait: within the limit
    assert a3.shed_count == 0 and len(door) == 3


def test_gone_forgets_a_connection_in_any_state() -> None:
    proc = Process()
    door = proc.admission()
    conn = proc.accept(door, "c")
    door.gone(conn)
    door.gone(conn)
    assert len(door) == 0


def test_this_process_limit_and_descriptors_read_back() -> None:
    assert open_files_limit() > 0
    assert open_files() > 0


def test_the_backlog_fits_in_the_reserve_where_the_open_files_limit_binds() -> None:
    assert backlog(128, 4096, limit=lambda: 1024) == 32
    assert backlog(8, 4096, limit=lambda: 1024) == 8  # never below a few
    assert backlog(128, 0, limit=lambda: 1 << 20) == 32  # no --max-connections: it binds
    assert backlog(128, 4096, limit=lambda: 1 << 20) == BACKLOG


@pytest.mark.parametrize(("argv", "match"), [
    (["--fd-reserve", "-1"], "--fd-reserve must be 0 or more"),
    (["--max-incomplete-per-address", "-1"], "--max-incomplete-per-address must be 0 or more"),
    (["--max-connections", "-1"], "--max-connections must be 0 or more"),
    (["--header-timeout-s", "0"], "--header-timeout-s must be above 0"),
])
def test_door_flags_the_gateway_cannot_use_are_refused(argv: list[str], match: str) -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    with pytest.raises(SystemExit, match=match):
        from_args(parser.parse_args(argv), {})
