"""The talker's speech on a server apart (``--tts-url``,
``plugins.cascade.remote_tts``), against ``fake_llm_server.py``, which speaks
with the piper voice the cascade ships: a clause streams back as 24 kHz pieces
while the server still sends it; a server that is down, silent or refusing is
a clear error; dropping the pieces drops the server's stream."""

from __future__ import annotations

import time

import numpy as np
import pytest
from model_servers import FakeServer

from engines.model_http import ServerDown, ServerRefused, ServerSilent
from plugins.cascade.remote_tts import RemoteTts

pytest.importorskip("piper", reason="the fake speech server speaks with piper")


def test_a_clause_streams_back_as_24_khz_pieces(fake_server: FakeServer) -> None:
    from plugins.cascade.talker import PiperTts

    tts = RemoteTts(fake_server.url, api_key="sk-tts", model="tts-x", voice="nova",
                    timeout_s=30)
    pieces = list(tts.synthesize("Hello there, how are you?"))
    assert list(tts.synthesize("  ")) == []
    assert len(pieces) > 3 and all(p.dtype == np.int16 for p in pieces)
    assert all(len(p) >= 2400 for p in pieces[:-1])  # 100 ms each, the last what is left
    voice = PiperTts(deterministic=True)
    made = sum(len(p) for p in voice.synthesize("Hello there, how are you?"))
    assert abs(sum(len(p) for p in pieces) - made * 24000 / voice.sample_rate) < 100
    assert fake_server.log()["spoken"] == [{
        "input": "Hello there, how are you?", "model": "tts-x", "voice": "nova",
        "response_format": "pcm", "authorization": "Bearer sk-tts"}]
    assert tts.title == f"nova of tts-x at {fake_server.url}"


def test_a_server_refusing_silent_or_down_is_a_clear_error(fake_server: FakeServer) -> None:
    tts = RemoteTts(fake_server.url, timeout_s=1)
    fake_server.control(speech_mode="refuse")
    with pytest.raises(ServerRefused, match=r"refused the clause \(HTTP 503\).*no voice"):
        list(tts.synthesize("Hello."))
    fake_server.control(speech_mode="hang")
    with pytest.raises(ServerSilent, match=f"speech server at {fake_server.url}/audio/speech "
                                           "said nothing for 1 s"):
        list(tts.synthesize("Hello."))
    fake_server.stop()
    with pytest.raises(ServerDown, match="is unreachable"):
        list(tts.synthesize("Hello."))
    with pytest.raises(ValueError, match="speech server's URL is http"):
        RemoteTts("speech:9000")


def test_dropping_the_pieces_drops_the_servers_stream(fake_server: FakeServer) -> None:
    fake_server.control(speech_mode="slow", speech_delay_s=0.2)
    pieces = RemoteTts(fake_server.url, timeout_s=30).synthesize("One, two, three, four.")
    assert len(next(pieces)) >= 2400
    pieces.close()  # what the talker's worker does at a barge-in
    for _ in range(400):  # the server learns of the drop on its own loop
        if fake_server.log()["speech_disconnects"]:
            break
        time.sleep(0.05)
    assert fake_server.log()["speech_disconnects"] == 1
