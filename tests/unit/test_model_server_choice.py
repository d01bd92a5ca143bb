"""``--llm-url`` and its neighbours, from the flags to the thinker's stage."""

from __future__ import annotations

import argparse

import pytest

from engines.stages import ChatServerStage, ModelServer
from gateway.model_flags import add_model_server_arguments, export_model_server_flags
from plugins.cascade.chat_thinker import ChatThinker
from plugins.cascade.llm import LlmChoice, LlmConfigError


def test_a_url_puts_the_thinker_on_that_server() -> None:
    choice = LlmChoice.from_env({"DUPLEX_GATEWAY_LLM_URL": "http://gpu:8000/v1",
                                 "DUPLEX_LLM_API_KEY": "sk-1",
                                 "DUPLEX_GATEWAY_LLM_MODEL": "qwen",
                                 "DUPLEX_GATEWAY_LLM_TIMEOUT_S": "2.5",
                                 "DUPLEX_GATEWAY_LLM_MAX_STREAMS": "3",
                                 "DUPLEX_GATEWAY_LLM_MAX_WAITING": "0",
                                 "DUPLEX_GATEWAY_LLM_ENGINE": "vllm"})  # a URL wins
    assert choice.server == ModelServer("http://gpu:8000/v1", "sk-1", "qwen", 2.5, 3, 0)
    assert choice.module is None and choice.prepare(print) == "qwen"
    assert choice.describe() == "qwen at http://gpu:8000/v1"
    stage = choice.server_stage("think")
    assert isinstance(stage, ChatServerStage) and isinstance(stage.adapter, ChatThinker)
    assert stage.server is choice.server


def test_defaults_and_the_gateways_own_key_variable() -> None:
    choice = LlmChoice.from_env({"DUPLEX_GATEWAY_LLM_URL": "https://api.example.com/v1",
                                 "DUPLEX_GATEWAY_LLM_API_KEY": "sk-gw",
                                 "DUPLEX_LLM_API_KEY": "sk-other"})
    assert choice.server == ModelServer("https://api.example.com/v1", "sk-gw")
    assert choice.describe() == "the first model at https://api.example.com/v1"
    assert choice.prepare(print) == ""


@pytest.mark.parametrize(("env", "why"), [
    ({"DUPLEX_GATEWAY_LLM_URL": "gpu:8000"}, "http"),
    ({"DUPLEX_GATEWAY_LLM_TIMEOUT_S": "soon"}, "TIMEOUT_S='soon'"),
    ({"DUPLEX_GATEWAY_LLM_TIMEOUT_S": "0"}, "a positive float"),
    ({"DUPLEX_GATEWAY_LLM_MAX_STREAMS": "0"}, "MAX_STREAMS='0'"),
    ({"DUPLEX_GATEWAY_LLM_MAX_WAITING": "-1"}, "MAX_WAITING='-1'"),
])
def test_bad_values_are_refused_by_name(env: dict[str, str], why: str) -> None:
    with pytest.raises(LlmConfigError, match=why):
        LlmChoice.from_env({"DUPLEX_GATEWAY_LLM_URL": "http://gpu:8000/v1", **env})


def test_the_flags_are_a_front_for_the_variables() -> None:
    parser = argparse.ArgumentParser()
    add_model_server_arguments(parser)
    args = parser.parse_args(["--llm-url", "http://gpu:8000/v1", "--llm-timeout-s", "3"])
    environ = {"DUPLEX_GATEWAY_LLM_MODEL": "kept", "DUPLEX_GATEWAY_LLM_TIMEOUT_S": "9"}
    export_model_server_flags(args, environ)
    assert environ == {"DUPLEX_GATEWAY_LLM_URL": "http://gpu:8000/v1",
                       "DUPLEX_GATEWAY_LLM_TIMEOUT_S": "3.0",
                       "DUPLEX_GATEWAY_LLM_MODEL": "kept"}
