"""Who may import whom, checked two ways: what a fresh interpreter has loaded after
importing a layer, and what the source says it imports.

- the core (``duplex/*.py``) is sans-I/O: it loads no event loop, store, server or ML;
- the engines and the generic orchestrator know no sessions: they load no
  ``duplex``, ``plugins`` or ``gateway`` module (and so no numpy either).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duplex

REPO = Path(duplex.__file__).parent.parent
CORE_DIR = REPO / "duplex"
CORE_MODULES = sorted(
    "duplex" if p.stem == "__init__" else f"duplex.{p.stem}" for p in CORE_DIR.glob("*.py")
)
FORBIDDEN = ["asyncio", "redis", "starlette", "numpy", "torch", "uvicorn", "websockets"]
# every engine module: each imports its heavy dependency (vLLM, llama.cpp) lazily,
# so the whole contract and every engine loads on the standard library alone
ENGINE_MODULES = sorted(
    "engines" if p.stem == "__init__" else f"engines.{p.stem}"
    for p in (REPO / "engines").glob("*.py")
)
SESSION_AWARE = ["duplex", "plugins", "gateway", "numpy"]

PROBE = """
import importlib, json, sys
for m in json.loads(sys.argv[1]):
    importlib.import_module(m)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(modules: list[str]) -> set[str]:
    """Every module a fresh interpreter holds once it has imported ``modules``
    (run in the repository, so this checkout's code is what loads)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(modules)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def roots(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_core_modules_are_discovered() -> None:
    expected = {"fence", "lease", "turns", "ledger", "journal", "pacing", "config", "commands",
                "events", "effects", "session", "errors"}
    assert {m.removeprefix("duplex.") for m in CORE_MODULES} >= expected
    assert not any(m.startswith("duplex.store") for m in CORE_MODULES)


def test_core_imports_no_io_or_ml() -> None:
    loaded = loaded_after(CORE_MODULES)
    assert "duplex.session" in loaded  # the probe did import the core
    assert roots(loaded).isdisjoint(FORBIDDEN), sorted(roots(loaded) & set(FORBIDDEN))
    # the core does not reach into its store adapter
    assert not any(n.startswith("duplex.store") for n in loaded)


def test_probe_detects_a_forbidden_import() -> None:
    # guard against a probe that can never fail: asyncio must show up when imported
    assert "asyncio" in roots(loaded_after(["asyncio"]))


def test_engines_and_the_orchestrator_base_load_no_sessions_or_plugins() -> None:
    """The engine contract and the generic orchestrator route opaque tags: importing
    them (every engine module included) loads no session, plugin or gateway code."""
    assert {"engines", "engines.stages", "engines.in_process",
            "engines.llamacpp", "engines.vllm"} <= set(ENGINE_MODULES)
    loaded = loaded_after([*ENGINE_MODULES, "orchestrator.base"])
    assert {*ENGINE_MODULES, "orchestrator.base"} <= loaded
    assert roots(loaded).isdisjoint(SESSION_AWARE), \
        sorted(n for n in loaded if n.split(".")[0] in SESSION_AWARE)


def test_probe_sees_session_code_loaded_through_a_plugin() -> None:
    # the same check, shown able to fail: the plugin contract loads the core and numpy
    loaded = roots(loaded_after(["plugins.base"]))
    assert {"plugins", "duplex", "numpy"} <= loaded


# -- who may import whom (docs/architecture.md §2), read from the source ----------------


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
    contract (``engines.stages``), but how they run is not its business. Its speech
    clients share the HTTP client of model servers (``engines.model_http``: where a
    server lives, and how its failures are told), not how any stage runs."""
    assert offenders("plugins", ("orchestrator", "engines", "gateway"),
                     allowed=("engines.stages", "engines.model_http")) == {}


def test_engines_and_the_orchestrator_name_no_sessions() -> None:
    """The dependency runs gateway → orchestrator → engines, never back: they route
    opaque tags, and the session-aware subclass (``gateway.session_orchestrator``)
    fills in fences. Type-only imports count too: not even a session type."""
    assert offenders("engines", ("duplex", "plugins", "orchestrator", "gateway")) == {}
    assert offenders("orchestrator", ("duplex", "plugins", "gateway")) == {}


def test_the_import_check_sees_imports() -> None:
    assert "duplex.fence" in imported_roots(REPO / "gateway" / "session_orchestrator.py")
