"""``plugins.cascade.speech_server``: a speech server's settings from the
variables, and one process's use of it (its gate, its counts); and
``gateway.config_checks.check_model_servers``, which refuses the model servers'
bad numbers before the gateway starts."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from engines.model_http import Endpoint, ServerBusy, ServerDown
from gateway.config_checks import check_model_servers
from gateway.model_flags import add_model_server_arguments, export_model_server_flags
from plugins.cascade.remote_asr import RemoteAsr
from plugins.cascade.remote_tts import RemoteTts
from plugins.cascade.speech_server import ServerUse, SpeechServer

URL = "http://gpu:8000/v1"


def test_the_listener_has_its_own_timeout_else_the_thinkers() -> None:
    asr = {"DUPLEX_GATEWAY_ASR_URL": URL}
    assert SpeechServer.from_env(asr, "ASR") == SpeechServer(URL, None, 10.0, 4, 8)
    thinkers = {**asr, "DUPLEX_GATEWAY_LLM_TIMEOUT_S": "30"}
    assert SpeechServer.from_env(thinkers, "ASR") == SpeechServer(URL, None, 30.0, 4, 8)
    own = {**thinkers, "DUPLEX_GATEWAY_ASR_TIMEOUT_S": "2.5",
           "DUPLEX_GATEWAY_ASR_MAX_STREAMS": "2", "DUPLEX_GATEWAY_ASR_MAX_WAITING": "0",
           "DUPLEX_GATEWAY_ASR_API_KEY": "sk-asr"}
    assert SpeechServer.from_env(own, "ASR") == SpeechServer(URL, "sk-asr", 2.5, 2, 0)
    # the talker never took the thinker's
    assert SpeechServer.from_env({"DUPLEX_GATEWAY_TTS_URL": URL,
                                  "DUPLEX_GATEWAY_LLM_TIMEOUT_S": "30"}, "TTS") == \
        SpeechServer(URL, None, 10.0, 4, 8)
    assert SpeechServer.from_env({}, "ASR") is None


@pytest.mark.parametrize(("name", "bad", "why"), [
    ("ASR_TIMEOUT_S", "soon", "a positive float"), ("ASR_MAX_STREAMS", "0", "a positive int"),
    ("TTS_MAX_WAITING", "-1", "int >= 0"), ("TTS_MAX_WAITING", "many", "int >= 0")])
def test_bad_numbers_are_refused_by_their_variable(name: str, bad: str, why: str) -> None:
    role = name[:3]
    with pytest.raises(ValueError, match=f"DUPLEX_GATEWAY_{name}='{bad}': {why}"):
        SpeechServer.from_env({f"DUPLEX_GATEWAY_{role}_URL": URL,
                               f"DUPLEX_GATEWAY_{name}": bad}, role)


def test_the_flags_reach_the_clients_and_their_stages_threads() -> None:
    parser = argparse.ArgumentParser()
    add_model_server_arguments(parser)
    environ: dict[str, str] = {}
    export_model_server_flags(parser.parse_args([
        "--asr-url", URL, "--asr-max-streams", "2", "--asr-max-waiting", "3",
        "--asr-timeout-s", "4", "--tts-url", URL, "--tts-max-streams", "1",
        "--tts-max-waiting", "0"]), environ)
    check_model_servers(environ)
    asr, tts = RemoteAsr.from_env(environ), RemoteTts.from_env(environ)
    assert asr is not None and tts is not None
    # a thread per stream and per waiter, and one that refuses the next at once
    assert (asr.use.threads, tts.use.threads) == (6, 2)
    assert (asr.use.name, tts.use.name) == ("asr", "tts")


@pytest.mark.parametrize(("env", "why"), [
    ({"DUPLEX_GATEWAY_TTS_MAX_WAITING": "-1"},
     r"--tts-max-waiting \(env DUPLEX_GATEWAY_TTS_MAX_WAITING\) must be 0 or more, not -1"),
    ({"DUPLEX_GATEWAY_ASR_MAX_STREAMS": "0"}, "--asr-max-streams .* must be above 0, not 0"),
    ({"DUPLEX_GATEWAY_ASR_TIMEOUT_S": "soon"}, "--asr-timeout-s .* must be a number, not 'soon'"),
    ({"DUPLEX_GATEWAY_LLM_MAX_WAITING": "1.5"},
     "--llm-max-waiting .* must be a whole number, not '1.5'"),
    ({"DUPLEX_GATEWAY_LLM_TIMEOUT_S": "inf"}, "--llm-timeout-s .* must be a finite number"),
])
def test_bad_model_server_numbers_stop_the_gateway_by_name(env: dict[str, str],
                                                           why: str) -> None:
    with pytest.raises(SystemExit, match=why):
        check_model_servers(env)


def test_zero_waiting_and_unset_numbers_pass() -> None:
    check_model_servers({"DUPLEX_GATEWAY_TTS_MAX_WAITING": "0", "DUPLEX_GATEWAY_ASR_URL": URL,
                         "DUPLEX_GATEWAY_LLM_TIMEOUT_S": ""})


def test_a_use_counts_each_requests_outcome_and_each_dropped_stream() -> None:
    use = ServerUse("tts", Endpoint.parse(URL), SpeechServer(URL, max_streams=1, max_waiting=0))
    with use.request():
        pass
    with pytest.raises(ServerDown), use.request():
        raise ServerDown("down")
    with pytest.raises(KeyError), use.request():
        raise KeyError("a bug")

    def speaking() -> Iterator[int]:
        with use.request():
            yield 1
            yield 2

    pieces = speaking()
    assert next(pieces) == 1
    assert (use.gate.open, use.gate.waiting) == (1, 0)
    with pytest.raises(ServerBusy, match=r"--tts-max-streams 1, --tts-max-waiting 0"):
        with use.request():
            pass
    pieces.close()  # a barge-in
    assert use.gate.open == 0
    assert dict(use.counts) == {"ok": 1, "ServerDown": 1, "failed": 1, "ServerBusy": 1}
    assert use.disconnects == 1


def test_serve_refuses_a_bad_number_before_it_starts(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from gateway import cli

    monkeypatch.setattr(cli, "interrupt_as_terminate", lambda: None)  # pytest keeps Ctrl-C
    # the flag is exported to this variable: set first, monkeypatch restores it after
    monkeypatch.setenv("DUPLEX_GATEWAY_TTS_MAX_WAITING", "0")
    assert cli.main(["serve", "--tts-max-waiting", "-1"]) == 2
    assert "--tts-max-waiting (env DUPLEX_GATEWAY_TTS_MAX_WAITING) must be 0 or more, " \
           "not -1" in capsys.readouterr().err
