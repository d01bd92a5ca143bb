"""The demo over https:// and wss:// (a self-signed development certificate, made as
docs/deployment.md "TLS" says): the page picks wss:// from its own origin, and a turn works."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from demo_files import write_wav
from gateway_process import GatewayProcess

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem"),
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    proc = GatewayProcess(where / "data", args=[
        "--plugin", "tone", "--output-lead-ms", "300",
        "--ssl-certfile", str(where / "cert.pem"), "--ssl-keyfile", str(where / "key.pem")])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_a_turn_over_wss(open_demo, tls_gateway: GatewayProcess, tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "mic.wav", [("silence", 0.5), ("tone", 1.0), ("silence", 2.0)])
    # the browser cannot know a self-signed certificate: told to accept it, as a
    # developer clicks through the warning once
    demo = open_demo(tls_gateway, wav, extra_args=("--ignore-certificate-errors",))
    assert demo.page.url.startswith("https://")
    demo.talk()
    demo.wait("__duplexDemo.stats.events['response.done'] >= 1", 20)
    h = demo.hook()
    # an https page may open no ws:// socket (mixed content): connected means wss://
    assert h["state"] == "connected" and h["seqGaps"] == 0
    assert h["assistant"].startswith("answer to turn 1:"), h
