"""``--workers``: the configuration a worker is given, and the relay address it advertises."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.config import GatewayConfig, decode_config, encode_config
from gateway.workers import _relay_url


@pytest.fixture
def private() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


def test_a_worker_gets_the_parents_configuration_exactly() -> None:
    config = GatewayConfig(host="0.0.0.0", port=0, data_dir=Path("/tmp/d"), api_key="k",
                           redis_url="unix:///tmp/d/valkey/valkey.sock", workers=4,
                           shutdown_timeout_s=2.5, ssl_certfile=Path("/c.pem"),
                           redis_replica_acks=None)
    assert decode_config(json.loads(json.dumps(encode_config(config)))) == config


def test_each_worker_advertises_its_own_relay_port(private: socket.socket) -> None:
    port = private.getsockname()[1]
    config = GatewayConfig(host="127.0.0.1", port=8000)
    assert _relay_url(config, private) == f"ws://127.0.0.1:{port}"
    tls = replace(config, ssl_certfile=Path("c"), ssl_keyfile=Path("k"))
    assert _relay_url(tls, private) == f"wss://127.0.0.1:{port}"


def test_an_advertised_host_is_kept_with_the_workers_port(private: socket.socket) -> None:
    port = private.getsockname()[1]
    config = GatewayConfig(advertise_url="wss://gw-3.internal:8000")
    assert _relay_url(config, private) == f"wss://gw-3.internal:{port}"
    v6 = GatewayConfig(advertise_url="ws://[fd00::3]:8000")
    assert _relay_url(v6, private) == f"ws://[fd00::3]:{port}"


def test_workers_out_of_bounds_are_refused() -> None:
    from gateway.config import _check

    for bad in (0, 257):
        with pytest.raises(SystemExit, match="--workers must be between 1 and 256"):
            _check(GatewayConfig(workers=bad))
