"""Compatibility fixtures: real gateway processes for official client libraries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_process import GatewayProcess

API_KEY = "compat-secret"


def _serve(tmp: pytest.TempPathFactory, name: str, *args: str) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(Path(tmp.mktemp(name)),
                          args=["--plugin", "tone", "--output-lead-ms", "300", *args]).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    yield from _serve(tmp_path_factory, "compat")


@pytest.fixture(scope="session")
def api_key() -> str:
    return API_KEY


@pytest.fixture(scope="module")
def keyed_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway that requires ``API_KEY``."""
    yield from _serve(tmp_path_factory, "compat-keyed", "--api-key", API_KEY)
