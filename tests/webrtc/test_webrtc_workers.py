"""WebRTC under ``--workers``: each call terminates on the worker that got its offer,
which owns its session; a hang-up that reaches another worker is passed to the owner
(over its advertised relay address), so every ``DELETE`` ends its call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from client import meta, silence, tone
from client import valkey as valkey_of
from gateway_process import GatewayProcess, running_tone
from peer_client import PeerClient

CALLS = 4  # each on its own connection: the kernel spreads them over the workers


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(Path(tmp_path_factory.mktemp("workers")), "--workers", "2") as proc:
        yield proc


async def test_every_hang_up_ends_its_call_whichever_worker_it_reaches(
        workers: GatewayProcess) -> None:
    r = valkey_of(workers.data_dir)
    owners = set()
    for _ in range(CALLS):
        peer = await PeerClient.call(workers.http)
        try:
            created = await peer.recv()
            sid = created["session"]["id"]
            owners.add((await meta(r, sid))["owner"])
            peer.speak(np.concatenate([tone(1.0), silence(0.8)]))
            done = await peer.until("response.done")
            assert done["response"]["status"] == "completed"
            async with httpx.AsyncClient(timeout=30.0) as http:  # a new connection each
                hung_up = await http.delete(peer.call_url)
            assert hung_up.status_code == 204, (hung_up.text, workers.output[-20:])
            assert (await meta(r, sid))["state"] != "open"
        finally:
            await peer.close()
    print("owners:", owners)  # which workers served the calls, for the log
    await r.aclose()
