"""The codecs do no I/O: importing them pulls in no event loop, server or store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gateway

CODECS = ["gateway.transports.codec", "gateway.transports.realtime_codec",
          "gateway.telephony.twilio_codec", "gateway.telephony.playback",
          "gateway.transports.sdp_offer", "gateway.transports.peer_audio",
          "gateway.transports.speaker"]
IO = ["asyncio", "starlette", "uvicorn", "websockets", "redis", "httpx"]

PROBE = """
import importlib, json, sys
for m in json.loads(sys.argv[1]):
    importlib.import_module(m)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def _roots(modules: list[str]) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(modules)],
                          capture_output=True, text=True, timeout=60, check=False,
                          cwd=Path(gateway.__file__).parent.parent)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_codecs_import_no_io() -> None:
    loaded = _roots(CODECS)
    assert "gateway" in loaded
    assert loaded.isdisjoint(IO), sorted(loaded & set(IO))


def test_the_probe_sees_io() -> None:
    assert "starlette" in _roots(["gateway.transports.frames"])
