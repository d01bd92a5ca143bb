"""A real gateway on the one-stage ``ReversePlugin`` (loaded by dotted path)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_E2E = str(Path(__file__).resolve().parent.parent / "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from gateway_process import GatewayProcess, running  # noqa: E402

PLUGIN = "tests.one_stage.reverse_plugin:ReversePlugin"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with running(tmp_path_factory.mktemp("reverse"), "--plugin", PLUGIN,
                 "--output-lead-ms", "300") as proc:
        yield proc
