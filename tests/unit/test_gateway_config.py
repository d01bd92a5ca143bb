"""Gateway flags: environment fallbacks and the derived defaults."""

from __future__ import annotations

import argparse
import sys

import pytest

from gateway import serving
from gateway.config import GatewayConfig, add_serve_arguments, from_args


def config_of(argv: list[str], env: dict[str, str] | None = None) -> GatewayConfig:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return from_args(parser.parse_args(argv), env or {})


@pytest.mark.parametrize(("argv", "env", "acks"), [
    ([], {}, 0),  # the embedded Valkey has no replicas
    (["--redis-url", "redis://h:6379"], {}, 0),
    (["--redis-url", "redis+sentinel://h:26379/gw"], {}, 1),  # behind Sentinel: wait for one
    (["--redis-url", "redis+sentinel://h:26379/gw", "--redis-replica-acks", "0"], {}, 0),
    ([], {"REDIS_URL": "redis+sentinel://h/gw", "DUPLEX_GATEWAY_REDIS_REPLICA_ACKS": "2"}, 2),
])
def test_replica_acks_default_to_one_behind_sentinel(argv: list[str], env: dict[str, str],
                                                     acks: int) -> None:
    assert config_of(argv, env).replica_acks == acks


def test_negative_replica_acks_are_refused() -> None:
    with pytest.raises(SystemExit, match="redis-replica-acks"):
        config_of(["--redis-replica-acks", "-1"])


def test_a_bad_env_value_names_its_variable() -> None:
    with pytest.raises(SystemExit, match="DUPLEX_GATEWAY_PORT"):
        config_of([], {"DUPLEX_GATEWAY_PORT": "eighty"})


@pytest.mark.parametrize(("argv", "env", "match"), [
    (["--allowed-origins", "https://ok.example,app.example"], {}, "'app.example' is not an origin"),
    ([], {"DUPLEX_GATEWAY_ALLOWED_ORIGINS": "ftp://x"}, "'ftp://x' is not an origin"),
    (["--log-level", "trace"], {}, "--log-level must be one of"),
    ([], {"DUPLEX_GATEWAY_LOOP": "trio"}, "--loop must be one of"),
    (["--ws-compression", "gzip"], {}, "--ws-compression must be one of"),
    (["--exotel-credentials", "no-colon"], {}, "--exotel-credentials is KEY:TOKEN"),
    (["--session-max-store-bytes", "1000"], {}, "--session-max-store-bytes must be at least"),
    (["--retained-max-store-bytes", "-1"], {}, "--retained-max-store-bytes must be >= 0"),
    ([], {"DUPLEX_GATEWAY_VALKEY_MAXMEMORY": "1024"}, "--valkey-maxmemory must be at least"),
])
def test_values_the_gateway_cannot_use_are_refused_at_start(argv: list[str],
                                                            env: dict[str, str],
                                                            match: str) -> None:
    with pytest.raises(SystemExit, match=match):
        config_of(argv, env)


def test_allowed_origins_from_the_environment() -> None:
    spec = "https://app.example,http://localhost:*"
    assert config_of([], {"DUPLEX_GATEWAY_ALLOWED_ORIGINS": spec}).allowed_origins == spec
    assert config_of(["--allowed-origins", "*"]).allowed_origins == "*"


def test_the_event_loop_is_uvloop_unless_asyncio_is_asked_for() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert config_of([]).loop == "auto"
    assert serving.loop_factory("auto") is uvloop.new_event_loop
    assert serving.loop_factory("uvloop") is uvloop.new_event_loop
    assert serving.loop_factory("asyncio") is None


def test_without_uvloop_auto_falls_back_and_an_explicit_uvloop_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as where it is not installed
    assert serving.loop_factory("auto") is None
    with pytest.raises(SystemExit, match="uvloop is not installed"):
        serving.loop_factory("uvloop")


def test_the_journal_keeps_the_other_half_of_a_sessions_share() -> None:
    from gateway.gateway import journal_max_bytes

    assert journal_max_bytes(config_of([])) == 8 * 1024 * 1024  # as before the budget
    small = config_of(["--session-max-store-bytes", str(1024 * 1024)])
    assert journal_max_bytes(small) == 512 * 1024
    assert journal_max_bytes(config_of(["--resume-replay-max-bytes", "1000"])) == 1000
