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


# -- who may import whom (docs/architecture.md §2), read from the source ----------------

REPO = CORE_DIR.parent


def imported_roots(path: Path) -> set[str]:
    """The dotted names a module imports (``import x.y`` and ``from x.y import z``)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def offenders(folder: str, forbidden: tuple[str, ...],
              allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    found = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        bad = sorted(n for n in imported_roots(path)
                     if n.split(".")[0] in forbidden and n not in allowed)
        if bad:
            found[str(path.relative_to(REPO))] = bad
    return found


def test_plugins_import_the_engine_contract_alone() -> None:
    """A plugin is model code and its plan: it describes its stages in the engine
    contract (``engines.stages``), but how they run is not its business."""
    assert offenders("plugins", ("orchestrator", "engines", "gateway"),
                     allowed=("engines.stages",)) == {}


def test_engines_and_the_orchestrator_base_know_no_sessions() -> None:
    """The dependency runs duplex → base, never back: the base and the engines
    route opaque tags, the session-aware subclass fills in fences."""
    assert offenders("engines", ("duplex", "plugins", "orchestrator", "gateway")) == {}
    base = sorted(n for n in imported_roots(REPO / "orchestrator" / "base.py")
                  if n.split(".")[0] in ("duplex", "gateway"))
    assert base == []


def test_the_import_check_sees_imports() -> None:
    assert "duplex.fence" in imported_roots(REPO / "orchestrator" / "duplex.py")
