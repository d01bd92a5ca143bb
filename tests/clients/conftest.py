"""The client tier: real clients from the registries, pinned, against a real gateway.

One TLS tone gateway with an API key serves the whole tier over ``wss://`` (the npm
``openai`` client dials nothing else); every client trusts its development
certificate the way docs/deployment.md "TLS" says (``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``) and
sends the key its own way (Bearer header or the browser subprotocol). Each driver runs
as a subprocess in its client's environment and prints a JSON report of what the
client's user saw; the tests assert on that.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from envs import HERE, INSTALL_TIMEOUT_S, Installs
from gateway_process import GatewayProcess, running_tone
from pins import CLIENTS
from tier import API_KEY, Drivers, conformance


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(item.path).parents:
            continue
        # the first test waits for the clients' installs (about a minute when cold)
        item.add_marker(pytest.mark.timeout(INSTALL_TIMEOUT_S + 120))
        if shutil.which("openssl") is None:  # no certificate, no wss://
            item.add_marker(pytest.mark.skip(reason="needs openssl"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if conformance.accepted or conformance.rejected:
        terminalreporter.section("client tier: server events against the openai package's types")
        for line in conformance.summary():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def installs(request: pytest.FixtureRequest) -> Iterator[Installs]:
    # start at once every environment a selected test needs, and only those
    modules = {Path(item.path).name for item in request.session.items}
    started = Installs({where for where, _package, module in CLIENTS.values()
                        if module in modules})
    yield started
    started.close()
    print(f"\nclient tier install seconds: {started.seconds()}")  # shown with -s


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1, made as docs/deployment.md "TLS" says; its
    key beside it."""
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


@pytest.fixture(scope="session")
def drivers(gateway: GatewayProcess, cert: Path, installs: Installs) -> Drivers:
    return Drivers(gateway, cert, installs)
