"""When traces are exported (``gateway.tracing``): asked for by ``--otel`` or the
standard OTLP variables; refused at startup without the ``otel`` extra; and with
nothing asking, nothing of OpenTelemetry is imported."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gateway import tracing
from gateway.config import GatewayConfig, add_serve_arguments, from_args
from gateway.session.turn_split import TurnSplit


def config_of(argv: list[str], env: dict[str, str]) -> GatewayConfig:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return from_args(parser.parse_args(argv), env)


@pytest.mark.parametrize(("argv", "env", "why"), [
    ([], {}, None),
    (["--otel", "http://collector:4318"], {}, "--otel"),
    ([], {"DUPLEX_GATEWAY_OTEL": "http://collector:4318"}, "--otel"),
    ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
     "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ([], {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, None),
])
def test_traces_are_asked_for_by_the_flag_or_the_standard_variables(
        argv: list[str], env: dict[str, str], why: str | None) -> None:
    assert tracing.asked(config_of(argv, env), env) == why


def test_asking_without_the_extra_is_a_clear_startup_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gateway.tracing_otlp", None)  # the extra is absent
    with pytest.raises(SystemExit) as refused:
        config_of(["--otel", "http://collector:4318"], {})
    assert "--otel" in str(refused.value)
    assert "pip install 'duplex-gateway[otel]'" in str(refused.value)
    config_of([], {})  # not asked: the missing extra is no matter


def test_nothing_of_opentelemetry_is_imported_unless_asked() -> None:
    """Not its SDK's tracing nor its exporter (redis-py looks for OpenTelemetry's
    metrics on its own, which is no concern of this switch)."""
    probe = (
        "import sys, argparse\n"
        "from gateway.config import add_serve_arguments, from_args\n"
        "from gateway.app import create_app\n"
        "from gateway import tracing\n"
        "p = argparse.ArgumentParser(); add_serve_arguments(p)\n"
        "config = from_args(p.parse_args(['--plugin', 'tone']), {})\n"
        "create_app(config); tracing.start(config)\n"
        "print(sorted(m for m in sys.modules if m.startswith(\n"
        "    ('gateway.tracing_otlp', 'opentelemetry.sdk.trace', 'opentelemetry.exporter'))))\n")
    env = {"PATH": "/usr/bin:/bin"}  # no OTEL_* variables from this process
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_when_not_tracing_the_hooks_do_nothing() -> None:
    assert tracing.socket_trace(object()) is tracing.UNTRACED
    tracing.turn(TurnSplit(12.0), tracing.TurnIds("sess_x", "resp_x", 1), tracing.UNTRACED)
    with tracing.relayed("sess_x", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
                         ) as headers:
        assert headers == {}


def test_the_otel_endpoint_is_a_base_url_or_the_traces_url() -> None:
    from gateway.tracing_otlp import traces_url

    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"
