"""The client tier: real clients from the registries, pinned, against a real gateway.

One TLS tone gateway with an API key serves the whole tier over ``wss://`` (the npm
``openai`` client dials nothing else); every client trusts its development
certificate the way the README says (``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``) and
sends the key its own way (Bearer header or the browser subprotocol). Each driver runs
as a subprocess in its client's environment and prints a JSON report of what the
client's user saw; the tests assert on that.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from envs import HERE, INSTALL_TIMEOUT_S, NODE_DIR, Installs
from gateway_process import GatewayProcess, running_tone

from plugins.tone import decode_turn

API_KEY = "client-tier-key"
DRIVER_TIMEOUT_S = 90
DRIVERS = HERE / "drivers"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(item.path).parents:
            continue
        # the first test waits for the clients' installs (about a minute when cold)
        item.add_marker(pytest.mark.timeout(INSTALL_TIMEOUT_S + 120))
        if shutil.which("openssl") is None:  # no certificate, no wss://
            item.add_marker(pytest.mark.skip(reason="needs openssl"))


@pytest.fixture(scope="session")
def installs() -> Iterator[Installs]:
    started = Installs()
    yield started
    started.close()
    print(f"\nclient tier install seconds: {started.seconds()}")  # shown with -s


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1, made as the README says; its key beside it."""
    where = tmp_path_factory.mktemp("client-cert")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem"),
                    "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return where / "cert.pem"


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory, cert: Path) -> Iterator[GatewayProcess]:
    with running_tone(tmp_path_factory.mktemp("client-gateway"), "--api-key", API_KEY,
                      "--ssl-certfile", str(cert),
                      "--ssl-keyfile", str(cert.with_name("key.pem"))) as proc:
        yield proc


class Drivers:
    """Runs a driver script against the gateway; returns its report."""

    def __init__(self, gateway: GatewayProcess, cert: Path, installs: Installs) -> None:
        self.env = {**os.environ, "GATEWAY_HTTPS_BASE": f"{gateway.http}/v1",
                    "GATEWAY_API_KEY": API_KEY, "NODE_EXTRA_CA_CERTS": str(cert),
                    "SSL_CERT_FILE": str(cert)}
        self.installs = installs

    def node(self, script: str, *args: str) -> dict[str, Any]:
        self.installs.node()
        return self._run(["node", *node_flags(), script, *args], NODE_DIR)

    def python(self, client: str, script: str, *args: str) -> dict[str, Any]:
        python = self.installs.python(client)
        return self._run([str(python), script, *args], DRIVERS)

    def _run(self, cmd: list[str], cwd: Path) -> dict[str, Any]:
        out = subprocess.run(cmd, cwd=cwd, env=self.env, capture_output=True, text=True,
                             timeout=DRIVER_TIMEOUT_S, check=False)
        lines = out.stdout.strip().splitlines()
        report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        if out.returncode != 0 or "failure" in report:
            raise AssertionError(f"{' '.join(cmd[1:])} failed (exit {out.returncode}):\n"
                                 f"{report.pop('failure', '')}\nreport: {report}\n"
                                 f"stderr: {out.stderr[-3000:]}")
        return report


def node_flags() -> list[str]:
    """Node 20 and 21 have the standard WebSocket behind a flag (22 has it on)."""
    version = subprocess.run(["node", "--version"], capture_output=True, text=True,
                             check=True).stdout
    major = int(version.lstrip("v").split(".")[0])
    return ["--experimental-websocket"] if major in (20, 21) else []


@pytest.fixture(scope="session")
def drivers(gateway: GatewayProcess, cert: Path, installs: Installs) -> Drivers:
    return Drivers(gateway, cert, installs)


def turn_of(reply: dict[str, Any]) -> int | None:
    """The turn the tone plugin's reply audio answers (its first word, decoded)."""
    head = np.frombuffer(base64.b64decode(reply["head_b64"]), "<i2")
    assert head.size >= 4800, f"under 200 ms of reply audio: {head.size} samples"
    return decode_turn(head[:4800], 24000)


def said_turn(transcript: str) -> int:
    """N of the tone plugin's "answer to turn N: …"."""
    words = transcript.split()
    assert words[:3] == ["answer", "to", "turn"], transcript
    return int(words[3].rstrip(":"))

