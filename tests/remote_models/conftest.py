"""Models on their own servers: the gateway's thinker on an OpenAI-compatible
server it reaches over HTTP (``--llm-url``), against real server processes
started here — ``fake_llm_server.py`` (deterministic, and slow, silent,
refusing or down on command) and llama.cpp's own HTTP server on CPU
(``deploy/model_server.py``, skipped without xllamacpp). The servers are
``model_servers``'s, the gateway's side ``cascade_turns``'s (modules of their own:
importing from ``conftest`` is ambiguous across test folders).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# the end-to-end tests reuse the realtime client of tests/e2e
_E2E = str(HERE.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from model_servers import FakeServer, started  # noqa: E402


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    with started(FakeServer()) as server:
        yield server


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    """One fake server for a whole module: the one its ``gateway`` reaches."""
    with started(FakeServer()) as fake:
        yield fake
