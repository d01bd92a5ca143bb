"""The default voice agent as the tiers that talk to it share it (tests/cascade,
tests/webrtc, tests/browser): a real gateway on the cascade plugin, one per test
module; Whisper, to hear what it says; and the words of what was said.

A tier's conftest offers the fixtures by importing them (``from cascade_agent
import agent``): pytest finds a fixture in a conftest's namespace by its name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_process import GatewayProcess, running_cascade


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway on the cascade plugin, offline (its models warm: up to minutes)."""
    with running_cascade(Path(tmp_path_factory.mktemp("cascade"))) as proc:
        yield proc


@pytest.fixture(scope="module")
def ears() -> Any:
    """The listener's Whisper, loaded, to transcribe the agent's replies."""
    from plugins.cascade.listener import WhisperAsr

    asr = WhisperAsr()
    asr.load()
    return asr


def words(text: str) -> set[str]:
    """The words of a transcript or a reply, lower case, punctuation dropped."""
    return set(re.findall(r"[a-z0-9']+", text.lower()))
