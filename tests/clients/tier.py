"""What the client tier's tests share: running a driver, and reading the tone plugin's
replies out of a driver's report."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from envs import HERE, NODE_DIR, Installs
from gateway_process import GatewayProcess
from openai_conformance import Conformance, Dialect

from plugins.tone import decode_turn

API_KEY = "client-tier-key"
DRIVER_TIMEOUT_S = 90
DRIVERS = HERE / "drivers"

# what the drivers' server events made of the openai package's types, over the run
conformance = Conformance()


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



def rejected_events(report: dict[str, Any], dialect: Dialect) -> list[str]:
    """The server events a driver received (its ``server_events``) that the official
    ``openai`` package's Realtime types reject (``tests/openai_conformance.py``)."""
    events = report["server_events"]
    assert len({e["type"] for e in events}) >= 10, "the driver reported too few events"
    return conformance.check(events, dialect)
