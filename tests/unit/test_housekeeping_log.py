"""A store that answers slowly while the models load is expected, not a warning
(issue 27: "Redis did not answer claim_expired within 2.0 s" on every warm start)."""

from __future__ import annotations

import logging

import pytest

from duplex.errors import StoreUnavailable
from gateway.config import GatewayConfig
from gateway.gateway import Gateway


class Warming:
    def readiness(self) -> str:
        return "stage think: loading the model into llama.cpp"


def test_a_slow_store_is_news_only_once_the_models_are_loaded(
        caplog: pytest.LogCaptureFixture) -> None:
    gateway = Gateway(GatewayConfig(redis_url="redis://127.0.0.1:1"))
    slow = StoreUnavailable("Redis did not answer claim_expired within 2.0 s")
    with caplog.at_level(logging.INFO, "duplex_gateway"):
        gateway.not_ready = "loading: [2/3] the thinker"
        gateway._housekeeping_failed(slow)
        gateway.not_ready = ""
        gateway.engines = [Warming()]  # type: ignore[list-item]
        gateway._housekeeping_failed(slow)
        gateway.engines = []
        gateway._housekeeping_failed(slow)
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO", "WARNING"]
    assert all("claim_expired" in r.getMessage() for r in caplog.records)
