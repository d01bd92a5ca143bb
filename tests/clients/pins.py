"""The clients the tier drives and where each one's version is pinned: the
compatibility table (docs/clients.md, summed up in the README) must name exactly
these, at exactly these versions."""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

# table row label → (where the pin lives, the package pinned, the tier's test module)
CLIENTS = {
    "npm `openai`, `OpenAIRealtimeWS`": ("npm", "openai", "test_openai_node.py"),
    "npm `openai`, `OpenAIRealtimeWebSocket`": ("npm", "openai", "test_openai_node.py"),
    "`@openai/agents-realtime`": ("npm", "@openai/agents-realtime", "test_agents_realtime.py"),
    "`openai` (Python), GA": ("openai", "openai", "test_openai_python.py"),
    "`openai` (Python), beta": ("openai", "openai", "test_openai_python.py"),
    "`openai-agents` (Python), `RealtimeAgent`": (
        "agents", "openai-agents", "test_openai_agents.py"),
    "`pipecat-ai`, `OpenAIRealtimeLLMService`": ("pipecat", "pipecat-ai", "test_pipecat.py"),
    "`livekit-plugins-openai`, `RealtimeModel`": (
        "livekit", "livekit-plugins-openai", "test_livekit.py"),
}


def npm_version(package: str) -> str:
    """The version ``node/package-lock.json`` installs."""
    lock = json.loads((HERE / "node" / "package-lock.json").read_text())
    return str(lock["packages"][f"node_modules/{package}"]["version"])


def pip_version(env: str, package: str) -> str:
    """The ``package==X`` pin of ``requirements-<env>.txt``."""
    text = (HERE / f"requirements-{env}.txt").read_text()
    match = re.search(rf"^{re.escape(package)}==(\S+)$", text, re.MULTILINE | re.IGNORECASE)
    if match is None:
        raise AssertionError(f"requirements-{env}.txt pins no {package}")
    return match.group(1)


def version(label: str) -> str:
    where, package, _ = CLIENTS[label]
    return npm_version(package) if where == "npm" else pip_version(where, package)
