"""The llama.cpp engine's tests: they need ``xllamacpp`` and skip without it.

As in tests/vllm, the check is an autouse session fixture (a skip raised while
pytest loads a conftest named on the command line would abort the run), and
the test modules import nothing from xllamacpp at module level.
"""

from __future__ import annotations

import pytest

SKIP_REASON = ("xllamacpp is not installed (pip install 'duplex-gateway[cpu]'; "
               "see docs/voice-agent.md)")


@pytest.fixture(scope="session", autouse=True)
def _needs_xllamacpp() -> None:
    pytest.importorskip("xllamacpp", reason=SKIP_REASON)
