"""Fixtures of the in-process tier: the app on a fresh Valkey per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harness import running_app
from starlette.applications import Starlette

from gateway.gateway import Gateway


@pytest.fixture
async def app(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path) as pair:
        yield pair


def _e2e_helpers() -> None:
    import sys

    here = Path(__file__).resolve().parent.parent
    for folder in ("e2e", "telephony"):
        path = str(here / folder)
        if path not in sys.path:
            sys.path.insert(0, path)


_e2e_helpers()
