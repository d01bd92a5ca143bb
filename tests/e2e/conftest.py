"""End-to-end fixtures: a real gateway process on the embedded Valkey.

Every event a ``RealtimeClient`` receives must parse with the official ``openai``
package's Realtime server-event types (GA, or beta for a beta client): each test's
events are checked when it ends (``tests/openai_conformance.py``), and the terminal
summary lists the event types that were checked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from client import RealtimeClient, received
from gateway_process import GatewayProcess, running_tone
from openai_conformance import Conformance

conformance = Conformance()


@pytest.fixture(autouse=True)
def events_conform_to_openais_types() -> Iterator[None]:
    received.clear()
    yield
    got = list(received)
    received.clear()
    rejected: list[str] = []
    for dialect in ("ga", "beta"):
        events = [e for d, e in got if d == dialect]
        rejected += conformance.check(events, dialect)
    if rejected:
        pytest.fail("server events the openai package's types reject:\n" + "\n".join(rejected),
                    pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if conformance.accepted or conformance.rejected:
        terminalreporter.section("server events checked against the openai package's types")
        for line in conformance.summary():
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("gateway")) as proc:
        yield proc


@pytest.fixture
async def client(gateway: GatewayProcess) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.recv()
    assert created["type"] == "session.created"
    try:
        yield c
    finally:
        await c.close()
