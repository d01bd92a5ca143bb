"""The browser demo over WebRTC (its transport switch): the microphone on the peer
connection's track, the reply on the gateway's track, the events on oai-events; the
latency it shows is mouth to ear as over the WebSocket (from the last voiced mic frame
to the reply's first sound, heard on the track)."""

from __future__ import annotations

from pathlib import Path

import pytest
from demo_files import write_wav

pytest.importorskip("aiortc", reason="the [webrtc] extra (aiortc) is not installed")
pytestmark = pytest.mark.slow

ONE_BURST = [("silence", 0.5), ("tone", 1.0), ("silence", 2.5)]
TWO_BURSTS = [("silence", 0.5), ("tone", 1.0), ("silence", 3.0), ("tone", 1.0),
              ("silence", 2.0)]


def test_a_turn_over_webrtc_shows_transcripts_and_latency(open_demo, tone_gateway,
                                                          tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", ONE_BURST),
                     query="&transport=webrtc")
    demo.talk()
    # bounds for a failing run only: a busy box sets up the peer connection slowly
    demo.wait("__duplexDemo.stats.events['response.done'] >= 1", 120)
    demo.wait("__duplexDemo.stats.latenciesMs.length >= 1", 60)
    h = demo.hook()
    assert demo.page.evaluate("__duplexDemo.transport") == "webrtc"
    assert h["state"] == "connected"
    assert h["user"].startswith("tone turn 1,"), h
    assert h["assistant"].strip() == "answer to turn 1: one two three four five", h
    assert h["stats"]["audioDeltas"] == 0  # the reply came on the track, not the channel
    assert "response.output_audio.delta" not in h["stats"]["events"]
    assert h["stats"]["replyFrames"] > 0  # its sound was heard on the track
    split = h["stats"]["splits"][0]
    assert h["stats"]["latenciesMs"][0] >= split["turn_detection"] - 40, h["stats"]
    assert "ms" in demo.page.text_content("#latency")
    assert not h["stats"]["errors"], h


def test_a_barge_in_over_webrtc_is_cut_by_the_gateway(open_demo, tone_gateway,
                                                      tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", TWO_BURSTS),
                     query="&transport=webrtc")
    demo.page.fill("#instructions", "words=40")
    demo.page.fill("#silence", "400")
    demo.talk()
    demo.wait("__duplexDemo.stats.truncates.length >= 1", 120)
    demo.wait("__duplexDemo.transcriptText('user').includes('tone turn 2')", 60)
    cut = demo.hook()["stats"]["truncates"][0]
    assert 200 < cut["audio_end_ms"] < 6000, cut  # played of the 8.8 s reply when cut
    demo.page.click("#hangup")
    demo.wait("__duplexDemo.state === 'closed'", 60)
