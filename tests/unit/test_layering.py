"""The duplex core is sans-I/O: importing it pulls in no event loop, store, server or ML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duplex

CORE_DIR = Path(duplex.__file__).parent
CORE_MODULES = sorted(
    "duplex" if p.stem == "__init__" else f"duplex.{p.stem}" for p in CORE_DIR.glob("*.py")
)
FORBIDDEN = ["asyncio", "redis", "starlette", "numpy", "torch", "uvicorn", "websockets"]

PROBE = """
import importlib, json, sys
mods = json.loads(sys.argv[1])
for m in mods:
    importlib.import_module(m)
roots = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"roots": roots, "store": [n for n in sys.modules
                                             if n.startswith("duplex.store")]}))
"""


def test_core_modules_are_discovered() -> None:
    expected = {"fence", "lease", "turns", "ledger", "journal", "pacing", "config", "commands",
                "events", "effects", "session", "errors"}
    assert {m.removeprefix("duplex.") for m in CORE_MODULES} >= expected
    assert not any(m.startswith("duplex.store") for m in CORE_MODULES)


def test_core_imports_no_io_or_ml() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(CORE_MODULES)],
        capture_output=True, text=True, timeout=60, cwd=CORE_DIR.parent, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = set(report["roots"])
    assert "duplex" in loaded  # the probe did import the core
    assert loaded.isdisjoint(FORBIDDEN), sorted(loaded & set(FORBIDDEN))
    assert report["store"] == []  # the core does not reach into its store adapter


def test_probe_detects_a_forbidden_import() -> None:
    # guard against a probe that can never fail: asyncio must show up when imported
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(["asyncio"])],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "asyncio" in json.loads(proc.stdout.strip().splitlines()[-1])["roots"]
