"""TLS: ``--ssl-certfile``/``--ssl-keyfile`` serve https:// and wss://, the official
client connects over wss:// trusting a development certificate through
``SSL_CERT_FILE`` (as docs/deployment.md "TLS" says to), and owner relays between TLS
gateways speak wss:// and verify the peer."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from client import RealtimeClient, last_seq, resume, speak
from gateway_process import REPO, GatewayProcess, running_tone
from redis_server import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, made as docs/deployment.md
    "TLS" says."""
    where = tmp_path_factory.mktemp("cert")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem"),
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return where / "cert.pem", where / "key.pem"


def tls_args(cert: tuple[Path, Path]) -> tuple[str, ...]:
    return ("--ssl-certfile", str(cert[0]), "--ssl-keyfile", str(cert[1]))


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory,
                cert: tuple[Path, Path]) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("tls"), *tls_args(cert)) as proc:
        yield proc


def trusting(cert: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert[0]))


async def test_wss_serves_a_turn_and_https_the_probes(
        tls_gateway: GatewayProcess, cert: tuple[Path, Path]) -> None:
    assert tls_gateway.ws.startswith("wss://")
    assert any("ready: https://" in line for line in tls_gateway.output)
    async with httpx.AsyncClient(verify=trusting(cert)) as http:
        assert (await http.get(f"{tls_gateway.http}/healthz")).status_code == 200
        page = await http.get(f"{tls_gateway.http}/")
        assert page.status_code == 200 and "<html" in page.text.lower()
    c = await RealtimeClient.connect(tls_gateway.ws, ssl=trusting(cert))
    try:
        await c.until("session.created")
        await speak(c, 0.6)
        done = await c.until("response.done")
        assert done["response"]["status"] == "completed"
    finally:
        await c.close()


async def test_an_untrusted_certificate_is_refused_by_the_client(
        tls_gateway: GatewayProcess) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await RealtimeClient.connect(tls_gateway.ws)


async def test_the_official_client_over_wss_with_ssl_cert_file(
        tls_gateway: GatewayProcess, cert: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from openai import AsyncOpenAI

    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))  # what a user of a dev cert does
    client = AsyncOpenAI(api_key="unused",
                         websocket_base_url=f"wss://{tls_gateway.address}/v1")
    async with client.realtime.connect(model="duplex-gateway") as conn:
        event = await conn.recv()
        assert event.type == "session.created"
        await conn.session.update(session={"type": "realtime", "instructions": "words=3"})
        await conn.response.create()
        async for event in conn:
            if event.type == "response.done":
                assert event.response.status == "completed"
                break


async def test_a_resume_on_another_tls_gateway_is_relayed_over_wss(
        tmp_path: Path, cert: tuple[Path, Path], redis_server: RedisServer) -> None:
    shared = ("--redis-url", redis_server.url, *tls_args(cert))
    with running_tone(tmp_path / "a", *shared) as a, running_tone(tmp_path / "b", *shared) as b:
        c = await RealtimeClient.connect(a.ws, ssl=trusting(cert))
        created = await c.until("session.created")
        c.ws.transport.abort()
        back = await resume(b.ws, created["session"]["id"], created["resume_token"],
                            last_seq(c.events), ssl=trusting(cert))
        try:
            resumed = await back.until("session.resumed")
            assert resumed["recovered"] is False  # served by A through B's wss relay
            assert await b.metric("duplex_resumes_relayed_total") == 1
        finally:
            await back.close()


def test_a_certificate_without_its_key_is_one_clear_line(cert: tuple[Path, Path]) -> None:
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--port", "0",
                          "--ssl-certfile", str(cert[0])], cwd=REPO, capture_output=True,
                         text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "duplex-gateway: --ssl-certfile and --ssl-keyfile go together: give both or neither"]
