"""WebRTC fixtures: a real gateway process and aiortc clients of /v1/realtime/calls.

Every event a call's ``oai-events`` channel carries must parse with the official
``openai`` package's GA server-event types, as every WebSocket event must in
tests/e2e: each test's events are checked when it ends.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("aiortc", reason="the [webrtc] extra (aiortc) is not installed")

# The e2e helpers (``client.py``) are shared with these tests.
_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from cascade_agent import agent, ears  # noqa: E402, F401 (fixtures, for the cascade's test)
from gateway_process import GatewayProcess, running_tone  # noqa: E402
from openai_conformance import Conformance  # noqa: E402
from peer_client import PeerClient, calls_made  # noqa: E402
from webrtc_limits import ICE_TIMEOUT_S  # noqa: E402

conformance = Conformance()


@pytest.fixture(autouse=True)
def events_conform_to_openais_types() -> Iterator[None]:
    calls_made.clear()
    yield
    rejected = [line for call in calls_made for line in conformance.check(call.events, "ga")]
    calls_made.clear()
    if rejected:
        pytest.fail("server events the openai package's types reject:\n" + "\n".join(rejected),
                    pytrace=False)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("gateway"), "--webrtc-ice-timeout-s",
                      ICE_TIMEOUT_S) as proc:
        yield proc


@pytest.fixture
async def call(gateway: GatewayProcess) -> AsyncIterator[PeerClient]:
    peer = await PeerClient.call(gateway.http)
    created = await peer.recv()
    assert created["type"] == "session.created"
    try:
        yield peer
    finally:
        await peer.close()
