"""The install tier: the wheel, built and installed into a fresh virtual environment.

It needs the package index (pip resolves the core dependencies): offline it
skips, saying why, unless ``DUPLEX_INSTALL_TESTS=required`` (CI sets it), when
an unreachable index fails the tier instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wheel_env import build_wheel, fresh_venv, index_unreachable


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The virtual environment the wheel went into."""
    why = index_unreachable()
    if why is not None:
        if os.environ.get("DUPLEX_INSTALL_TESTS") == "required":
            pytest.fail(f"the package index is unreachable ({why}); the install tier needs it")
        pytest.skip(f"the package index is unreachable ({why}): pip cannot install the wheel")
    work = tmp_path_factory.mktemp("wheel")
    return fresh_venv(work, build_wheel(work))
