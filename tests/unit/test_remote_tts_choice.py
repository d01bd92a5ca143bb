"""``--tts-url``'s variables, read by ``plugins.cascade.remote_tts``."""

from __future__ import annotations

import pytest

from plugins.cascade.remote_tts import RemoteTts


def test_the_variables_choose_the_server_and_bad_numbers_are_refused() -> None:
    assert RemoteTts.from_env({}) is None
    tts = RemoteTts.from_env({"DUPLEX_GATEWAY_TTS_URL": "http://gpu:8000/v1",
                              "DUPLEX_GATEWAY_TTS_MAX_STREAMS": "2",
                              "DUPLEX_GATEWAY_TTS_TIMEOUT_S": "2.5"})
    assert tts is not None and tts.max_streams == 2
    assert tts.title == "alloy of tts-1 at http://gpu:8000/v1"
    for name, bad in (("TIMEOUT_S", "soon"), ("MAX_STREAMS", "0")):
        with pytest.raises(ValueError, match=f"DUPLEX_GATEWAY_TTS_{name}='{bad}'"):
            RemoteTts.from_env({"DUPLEX_GATEWAY_TTS_URL": "http://gpu:8000/v1",
                                f"DUPLEX_GATEWAY_TTS_{name}": bad})


def test_the_flags_set_the_variables_the_talker_reads() -> None:
    import argparse

    from gateway.model_flags import add_model_server_arguments, export_model_server_flags

    parser = argparse.ArgumentParser()
    add_model_server_arguments(parser)
    environ: dict[str, str] = {}
    export_model_server_flags(parser.parse_args([
        "--tts-url", "http://gpu:8002/v1", "--tts-voice", "nova", "--tts-model", "kokoro",
        "--tts-max-streams", "8", "--tts-timeout-s", "3"]), environ)
    tts = RemoteTts.from_env(environ)
    assert tts is not None and tts.max_streams == 8
    assert tts.title == "nova of kokoro at http://gpu:8002/v1"
