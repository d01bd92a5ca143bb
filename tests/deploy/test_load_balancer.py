"""Several gateways for real: two gateway processes behind HAProxy (Debian's
package, run with the config shipped in ``deploy/haproxy.cfg``), on a Redis
primary with two replicas watched by three Sentinels. A client that only knows
the load balancer's address drops its socket mid-reply and resumes through it;
the round robin sends the resume to the other gateway, which relays it to the
session's owner, and every event arrives exactly once."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from client import RealtimeClient, last_seq, resume  # noqa: E402
from gateway_process import GatewayProcess, stop_all  # noqa: E402
from haproxy_process import INSTALLED, balancing  # noqa: E402
from redis_server import ReplicatedRedis, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(not INSTALLED,
                                reason="haproxy is not installed (apt-get install haproxy)")


@pytest.fixture(scope="module")
def redis() -> Iterator[ReplicatedRedis]:
    cluster = ReplicatedRedis(replicas=2, sentinels=3).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def gateways(redis: ReplicatedRedis, tmp_path_factory: pytest.TempPathFactory,
             ) -> Iterator[list[GatewayProcess]]:
    procs = []
    try:
        for n in range(2):
            port = free_port()  # given twice: the later --port wins over the fixture's 0
            proc = GatewayProcess(tmp_path_factory.mktemp(f"gw{n}"), args=[
                "--plugin", "tone", "--output-lead-ms", "300", "--redis-url", redis.url])
            proc.args += ["--port", str(port), "--advertise-url", f"ws://127.0.0.1:{port}"]
            procs.append(proc.start())
        yield procs
    finally:
        stop_all(procs)


@pytest.fixture(scope="module")
def balancer(gateways: list[GatewayProcess]) -> Iterator[str]:
    with balancing(gateways) as address:
        yield address


async def both_up(balancer: str) -> None:
    """Both gateways pass HAProxy's health check (its stats have no event for it)."""
    async with httpx.AsyncClient(timeout=5) as http:
        for _ in range(200):
            answers = [(await http.get(f"http://{balancer}/readyz")).json().get("owner")
                       for _ in range(4)]
            if len(set(answers)) == 2:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("HAProxy never balanced over both gateways")


async def test_a_resume_through_the_load_balancer_reaches_the_owner(
        balancer: str, gateways: list[GatewayProcess]) -> None:
    await both_up(balancer)
    url = f"ws://{balancer}/v1/realtime"
    c = await RealtimeClient.connect(url)
    created = await c.until("session.created")
    sid = created["session"]["id"]
    await c.send("session.update", session={"instructions": "words=30"})
    await c.send("response.create")
    first = await c.until("response.output_audio.delta")
    c.ws.transport.abort()  # mid-reply, no close frame
    before = [e for e in c.events if "server_event_seq" in e]
    relayed_before = [await g.metric("duplex_resumes_relayed_total") for g in gateways]
    back = await resume(url, sid, created["resume_token"], last_seq(before))
    try:
        resumed = await back.until("session.resumed")
        assert resumed["recovered"] is False  # served by the live owner, not taken over
        done = await back.until("response.done", timeout=20)
        assert done["response"]["id"] == first["response_id"]
        assert done["response"]["status"] == "completed"
        after = [e for e in back.events if "server_event_seq" in e]
        seqs = [e["server_event_seq"] for e in [*before, *after]]
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing twice
        relayed = [await g.metric("duplex_resumes_relayed_total") - b
                   for g, b in zip(gateways, relayed_before, strict=True)]
        # the round robin gave the resume to the gateway that did not open it
        assert sorted(relayed) == [0, 1], relayed
    finally:
        await back.close()
