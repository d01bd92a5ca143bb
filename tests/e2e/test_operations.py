"""Operating the gateway: probes, metrics, CLI and environment configuration, auth,
G.711 audio, the beta dialect, and the embedded Valkey's lifetime — all against real
``duplex-gateway serve`` processes."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from client import (
    RealtimeClient,
    expect_error,
    silence,
    speak,
    still_works,
    tone,
)
from gateway_process import REPO, GatewayProcess, running_tone
from prometheus_client.parser import text_string_to_metric_families

from duplex.store.embedded import accepts
from gateway.audio import resample, ulaw_decode, ulaw_encode
from gateway.config import ENV_PREFIX, GatewayConfig
from gateway.model_flags import FLAGS as MODEL_SERVER_FLAGS
from plugins.tone import decode_turn

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """At most one open session, configured through the environment only."""
    with running_tone(tmp_path_factory.mktemp("capped"),
                      env={ENV_PREFIX + "MAX_SESSIONS": "1"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("keyed"), "--api-key", "secret") as proc:
        yield proc


@pytest.fixture
async def http(gateway: GatewayProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.http, timeout=5.0) as c:
        yield c


async def metrics(http: httpx.AsyncClient) -> Samples:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def eventually(check: Any, timeout: float = 5.0) -> None:
    """Poll the async predicate ``check`` until it holds or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.02)


# -- probes and metrics --------------------------------------------------------------


async def test_healthz(http: httpx.AsyncClient) -> None:
    response = await http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz(gateway: GatewayProcess, http: httpx.AsyncClient) -> None:
    response = await http.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert body["plugin"] == "tone"
    assert isinstance(body["sessions"], int)
    # where the other gateways reach this one: its listening address (--port 0 here)
    assert body["advertised"] == gateway.ws.removesuffix("/v1/realtime")


async def test_metrics_follow_sessions_events_and_errors(gateway: GatewayProcess,
                                                         http: httpx.AsyncClient) -> None:
    async def idle() -> bool:
        return sample(await metrics(http), "duplex_sessions_active") == 0

    await eventually(idle)  # sessions of earlier tests may still be winding down
    before = await metrics(http)
    assert ("duplex_sessions_active", frozenset()) in before
    c = await RealtimeClient.connect(gateway.ws)
    try:
        assert (await c.recv())["type"] == "session.created"
        during = await metrics(http)
        assert sample(during, "duplex_sessions_active") == 1
        assert sample(during, "duplex_sessions_opened_total") == \
            sample(before, "duplex_sessions_opened_total") + 1
        created = ("duplex_server_events_total", frozenset({("type", "session.created")}))
        assert created in during
        assert during[created] == \
            sample(before, "duplex_server_events_total", type="session.created") + 1
        await c.send("no.such.event")
        await expect_error(c, "invalid_value")
        after_error = await metrics(http)
        assert sample(after_error, "duplex_errors_total", code="invalid_value") == \
            sample(during, "duplex_errors_total", code="invalid_value") + 1
        assert sample(after_error, "duplex_server_events_total", type="error") == \
            sample(during, "duplex_server_events_total", type="error") + 1
    finally:
        await c.close()

    await eventually(idle)  # the closed session is released


async def test_the_collector_is_out_of_the_way_and_its_pauses_are_measured(
        client: RealtimeClient, http: httpx.AsyncClient) -> None:
    """What was alive at readiness (the modules, the plugin, the app) is frozen out
    of every later collection (``gateway.heap``), and each pause is timed."""
    before = await metrics(http)
    assert sample(before, "duplex_gc_frozen_objects") > 10_000
    await speak(client, 0.4)
    await client.until("response.done")

    async def collected() -> bool:
        after = await metrics(http)
        return sample(after, "duplex_gc_pause_seconds_count", generation="0") > \
            sample(before, "duplex_gc_pause_seconds_count", generation="0")

    await eventually(collected)
    assert sample(await metrics(http), "duplex_gc_frozen_objects") == \
        sample(before, "duplex_gc_frozen_objects")  # once, at readiness


# -- command line and environment ----------------------------------------------------


def test_serve_help_lists_every_flag_and_its_env_var() -> None:
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--help"],
                         cwd=REPO, capture_output=True, text=True, timeout=30, check=True,
                         env={**os.environ, "COLUMNS": "80"}).stdout
    text = " ".join(out.split())  # undo argparse's line wrapping
    names = [f.name for f in dataclasses.fields(GatewayConfig)] + list(MODEL_SERVER_FLAGS)
    for name in names:
        flag, env = "--" + name.replace("_", "-"), ENV_PREFIX + name.upper()
        entry = re.search(rf"{flag} {name.upper()} [^\[]*\[env {env}; default [^\]]+\]", text)
        assert entry, f"{flag} with [env {env}; default …] missing from:\n{out}"
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out)) - {"--help"}
    assert listed == {"--" + n.replace("_", "-") for n in names}
    assert "REDIS_URL" in text


async def test_env_var_limits_sessions_and_closing_frees_the_slot(
        capped: GatewayProcess) -> None:
    first = await RealtimeClient.connect(capped.ws)
    try:
        assert (await first.recv())["type"] == "session.created"
        second = await RealtimeClient.connect(capped.ws)
        refusal = await second.recv()
        assert refusal["type"] == "error"
        assert refusal["error"]["type"] == "rate_limit_error"
        assert refusal["error"]["code"] == "resource_exhausted"
        await asyncio.wait_for(second.ws.wait_closed(), 5)
        assert second.ws.close_code == 1013
        await still_works(first)  # the admitted session is untouched
        await first.send("session.close")
        await first.until("session.closed")
        await asyncio.wait_for(first.ws.wait_closed(), 5)
        assert first.ws.close_code == 1000
        third = await RealtimeClient.connect(capped.ws)  # the slot is free again
        try:
            assert (await third.recv())["type"] == "session.created"
            await still_works(third)
        finally:
            await third.close()
    finally:
        await first.close()
    async with httpx.AsyncClient(base_url=capped.http, timeout=5.0) as http:
        rejected = await metrics(http)
    assert sample(rejected, "duplex_sessions_rejected_total", code="resource_exhausted") == 1


# -- API keys ------------------------------------------------------------------------


@pytest.mark.parametrize("how", [
    pytest.param({}, id="no_key"),
    pytest.param({"additional_headers": {"Authorization": "Bearer wrong"}}, id="wrong_bearer"),
    pytest.param({"subprotocols": ["realtime", "openai-insecure-api-key.wrong"]},
                 id="wrong_subprotocol_key"),
    pytest.param({"subprotocols": ["realtime"]}, id="subprotocol_without_key"),
])
async def test_missing_or_wrong_api_key_is_refused(keyed: GatewayProcess,
                                                   how: dict[str, Any]) -> None:
    c = await RealtimeClient.connect(keyed.ws, **how)
    try:
        refusal = await c.recv()
        assert refusal["type"] == "error"
        assert refusal["error"]["code"] == "invalid_api_key"
        assert refusal["error"]["type"] == "invalid_request_error"
        await asyncio.wait_for(c.ws.wait_closed(), 5)
        assert c.ws.close_code == 1008
        assert not c.of("session.created")
    finally:
        await c.close()


async def test_bearer_api_key_is_accepted(keyed: GatewayProcess) -> None:
    c = await RealtimeClient.connect(
        keyed.ws, additional_headers={"Authorization": "Bearer secret"})
    try:
        assert (await c.recv())["type"] == "session.created"
        await still_works(c)
    finally:
        await c.close()


async def test_browser_subprotocol_api_key_is_accepted(keyed: GatewayProcess) -> None:
    c = await RealtimeClient.connect(
        keyed.ws, subprotocols=["realtime", "openai-insecure-api-key.secret"])
    try:
        assert c.ws.subprotocol == "realtime"  # browsers fail the handshake otherwise
        assert (await c.recv())["type"] == "session.created"
        await still_works(c)
    finally:
        await c.close()


# -- G.711 ---------------------------------------------------------------------------


def ulaw_8k(pcm_24k: np.ndarray) -> bytes:
    return ulaw_encode(resample(pcm_24k, 24000, 8000)).tobytes()


async def test_g711_ulaw_in_and_out(client: RealtimeClient) -> None:
    await client.send("session.update", session={"audio": {
        "input": {"format": {"type": "audio/pcmu"}},
        "output": {"format": {"type": "audio/pcmu"}}}})
    session = (await client.until("session.updated"))["session"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["output"]["format"] == {"type": "audio/pcmu"}
    audio = ulaw_8k(tone(1.0)) + ulaw_8k(silence(0.8))
    for start in range(0, len(audio), 160):  # 20 ms of 8 kHz μ-law
        await client.send("input_audio_buffer.append",
                          audio=base64.b64encode(audio[start:start + 160]).decode())
    done = await client.until("response.done")
    assert done["response"]["status"] == "completed"
    # the input was heard at 8 kHz: about 1000 ms of speech, not a third or three times it
    heard = client.of("conversation.item.input_audio_transcription.completed")[0]
    speech_ms = int(re.search(r"(\d+) ms of speech", heard["transcript"])[1])
    assert 900 <= speech_ms <= 1100
    rid = done["response"]["id"]
    deltas = [base64.b64decode(e["delta"]) for e in client.of("response.output_audio.delta")
              if e["response_id"] == rid]
    words = done["response"]["output"][0]["content"][0]["transcript"].split()
    assert deltas and len(deltas) == len(words)  # one delta per 200 ms word
    assert all(abs(len(d) - 1600) <= 16 for d in deltas), [len(d) for d in deltas]
    assert abs(sum(len(d) for d in deltas) - 1600 * len(words)) <= 16
    pcm = ulaw_decode(np.frombuffer(b"".join(deltas), dtype=np.uint8))
    assert decode_turn(pcm[:1600], 8000) == 1
    assert decode_turn(pcm[-1600:], 8000) == 1


# -- the beta dialect ----------------------------------------------------------------

GA_ONLY = {"response.output_audio.delta", "response.output_audio.done",
           "response.output_audio_transcript.delta", "response.output_audio_transcript.done",
           "conversation.item.added", "conversation.item.done"}


async def beta_turn(gateway: GatewayProcess, how: dict[str, Any]) -> RealtimeClient:
    c = await RealtimeClient.connect(gateway.ws, **how)
    assert (await c.recv())["type"] == "session.created"
    await speak(c, 1.0)
    await c.until("response.done")
    await c.until("rate_limits.updated")
    return c


BETA_WAYS = [
    pytest.param({"additional_headers": {"OpenAI-Beta": "realtime=v1"}}, id="header"),
    pytest.param({"subprotocols": ["realtime", "openai-beta.realtime-v1"]}, id="subprotocol"),
]


@pytest.mark.parametrize("how", BETA_WAYS)
async def test_beta_dialect_event_names(gateway: GatewayProcess, how: dict[str, Any]) -> None:
    c = await beta_turn(gateway, how)
    try:
        types = c.types()
        assert not GA_ONLY & set(types), GA_ONLY & set(types)
        for name in ("response.audio.delta", "response.audio.done",
                     "response.audio_transcript.delta", "response.audio_transcript.done",
                     "conversation.item.created"):
            assert name in types
        created = c.of("response.created")[0]["response"]["id"]
        order = [t for t in types[types.index("response.created"):]
                 if not t.endswith(".delta")]
        assert order[:4] == ["response.created", "response.output_item.added",
                             "conversation.item.created", "response.content_part.added"]
        assert order[-6:] == ["response.audio.done", "response.audio_transcript.done",
                              "response.content_part.done", "response.output_item.done",
                              "response.done", "rate_limits.updated"]
        deltas = [e for e in c.events if e["type"] == "response.audio.delta"]
        pcm = np.concatenate([np.frombuffer(base64.b64decode(e["delta"]), dtype="<i2")
                              for e in deltas])
        assert all(e["response_id"] == created for e in deltas)
        assert decode_turn(pcm[:4800], 24000) == 1
        part = c.of("response.content_part.added")[0]["part"]
        assert part["type"] == "audio"
        items = [e["item"] for e in c.of("conversation.item.created")]
        assert [i["role"] for i in items] == ["user", "assistant"]
        assert items[1]["content"][0]["type"] == "audio"
        seqs = [e["server_event_seq"] for e in c.events]
        assert seqs == list(range(1, len(seqs) + 1))  # dropped GA-only events leave no gap
    finally:
        await c.close()


async def test_beta_dialect_session_object(gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(gateway.ws,
                                     additional_headers={"OpenAI-Beta": "realtime=v1"})
    try:
        session = (await c.recv())["session"]
        assert session["input_audio_format"] == "pcm16"
        assert session["output_audio_format"] == "pcm16"
        assert session["turn_detection"]["type"] == "server_vad"
        assert "audio" not in session
    finally:
        await c.close()


async def test_beta_dialect_response_done_content_types(gateway: GatewayProcess) -> None:
    c = await beta_turn(gateway, {"additional_headers": {"OpenAI-Beta": "realtime=v1"}})
    try:
        output = c.of("response.done")[0]["response"]["output"]
        assert output[0]["content"][0]["type"] == "audio"
    finally:
        await c.close()


# -- the embedded Valkey -------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Child pids of ``pid``: from /proc/<pid>/task/*/children, else by scanning ppids."""
    try:
        return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                for c in (task / "children").read_text().split()]
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN
        pass
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_embedded_valkey_dies_with_a_sigkilled_gateway(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    data = Path(tmp_path_factory.mktemp("doomed"))
    proc = GatewayProcess(data, args=["--plugin", "tone"]).start()
    valkeys: list[int] = []
    try:
        assert proc.proc is not None
        valkeys = [c for c in children(proc.proc.pid)
                   if b"valkey-server" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(valkeys) == 1, children(proc.proc.pid)
        valkey = valkeys[0]
        sock = data / "valkey" / "valkey.sock"
        assert accepts(sock)
        proc.kill()  # SIGKILL: no cleanup code runs in the gateway
        deadline = time.monotonic() + 10
        while alive(valkey):
            assert time.monotonic() < deadline, f"valkey-server {valkey} outlived the gateway"
            time.sleep(0.01)
        assert not accepts(sock)
    finally:
        proc.stop()
        for pid in valkeys:
            if alive(pid):  # do not leave a stray server behind a failed test
                os.kill(pid, signal.SIGKILL)
