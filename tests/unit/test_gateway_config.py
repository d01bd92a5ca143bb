"""Gateway flags: environment fallbacks and the derived defaults."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


@pytest.mark.parametrize(("argv", "match"), [
    (["--port", "99999"], "--port must be between 0 and 65535"),
    (["--port", "-1"], "--port must be between 0 and 65535"),
    (["--max-message-bytes", "-5"], "--max-message-bytes must be above 0, not -5"),
    (["--max-sessions", "0"], "--max-sessions must be above 0, not 0"),
    (["--disconnect-grace-s", "-1"], "--disconnect-grace-s must be 0 or more, not -1"),
    (["--idle-ttl-s", "nan"], "--idle-ttl-s must be a finite number"),
    (["--max-session-s", "inf"], "--max-session-s must be a finite number"),
    (["--plugin", "nope"], "--plugin 'nope' is not a plugin: use one of cascade, tone"),
    (["--plugin", "no_such_module_here:Plugin"], "cannot import no_such_module_here"),
    (["--plugin", "plugins.tone:NoSuchPlugin"], "plugins.tone has no class NoSuchPlugin"),
    (["--log-format", "xml"], "--log-format must be one of text, json"),
])
def test_bad_numbers_and_plugin_names_are_refused_before_anything_starts(
        argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit, match=match):
        config_of(argv)


def test_zero_stays_off_where_the_flags_say_so() -> None:
    config = config_of(["--port", "0", "--idle-ttl-s", "0", "--max-session-s", "0",
                        "--max-connections", "0", "--plugin", "plugins.tone:TonePlugin"])
    assert (config.port, config.idle_ttl_s, config.max_connections) == (0, 0.0, 0)


def test_tls_files_must_be_readable_pem(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate\n")
    for argv, match in [
        (["--ssl-certfile", str(tmp_path), "--ssl-keyfile", str(text)], "is a directory"),
        (["--ssl-certfile", str(tmp_path / "gone.pem"), "--ssl-keyfile", str(text)],
         "gone.pem: no such file"),
        (["--ssl-certfile", str(text), "--ssl-keyfile", str(text)],
         "not a PEM certificate and its key"),
        (["--ssl-ca-file", str(text)], "--ssl-ca-file .*: not PEM CA certificates"),
    ]:
        with pytest.raises(SystemExit, match=match):
            config_of(argv)


def test_the_default_data_dir_is_the_checkouts_own_else_the_users(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gateway import config

    repo = Path(__file__).resolve().parents[2]
    assert config.default_data_dir() == repo / ".data"
    assert config_of([]).data_dir == repo / ".data"
    monkeypatch.setattr(config, "checkout_root", lambda: None)  # an installed package
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert config.default_data_dir() == tmp_path / "duplex-gateway"


def test_help_lists_every_flag_once_in_its_section() -> None:
    from gateway.config import _FLAGS
    from gateway.flag_groups import FLAG_GROUPS

    placed = [name for _, names in FLAG_GROUPS.values() for name in names]
    assert sorted(placed) == sorted(_FLAGS)  # each flag in exactly one section
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    sections = {group.title: [a.dest for a in group._group_actions]
                for group in parser._action_groups if group._group_actions}
    assert "other" not in sections
    assert {title: tuple(dests) for title, dests in sections.items()
            if title in FLAG_GROUPS} == {t: names for t, (_, names) in FLAG_GROUPS.items()}
    port = parser._option_string_actions["--port"]
    assert port.help is not None and port.help.endswith("[env DUPLEX_GATEWAY_PORT; default 8000]")
    assert all(action.default is None for action in parser._actions if action.dest != "help")
