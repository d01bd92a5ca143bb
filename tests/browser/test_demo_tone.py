"""The browser demo's mechanics in a real Chromium against a real gateway on the
tone plugin (fast and deterministic: its VAD hears the fake mic's 440 Hz burst,
and its reply is "answer to turn N: one two …", 200 ms of tone per word)."""

from __future__ import annotations

from pathlib import Path

import pytest
from demo_files import write_wav

pytestmark = pytest.mark.slow

ONE_BURST = [("silence", 0.5), ("tone", 1.0), ("silence", 2.0)]
# the second burst lands while the (long) reply to the first is playing
TWO_BURSTS = [("silence", 0.5), ("tone", 1.0), ("silence", 3.0), ("tone", 1.0),
              ("silence", 2.0)]
SAMPLES_PER_WORD = 24000 * 200 // 1000


def test_turn_shows_transcripts_and_plays_reply(open_demo, tone_gateway, tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", ONE_BURST))
    demo.talk()
    demo.wait("__duplexDemo.stats.events['response.done'] >= 1", 20)
    # 1 s of speech → 5 number words after "answer to turn 1:" = 9 words of audio
    demo.wait(f"__duplexDemo.stats.playedSamples >= {9 * SAMPLES_PER_WORD}", 10)
    h = demo.hook()
    assert h["ctxState"] == "running" and h["ctxRate"] == 24000
    assert h["stats"]["micRmsMax"] > 0.2, "the fake mic was silent (bad WAV?)"
    assert h["stats"]["sentFrames"] > 50
    assert h["user"].startswith("tone turn 1,"), h
    assert h["assistant"].strip() == "answer to turn 1: one two three four five", h
    assert h["stats"]["playbackChunks"] >= h["stats"]["audioDeltas"] > 0
    assert h["state"] == "connected" and h["seqGaps"] == 0
    assert h["stats"]["latenciesMs"] and 0 < h["stats"]["latenciesMs"][0] < 5000
    assert "ms" in demo.page.text_content("#latency")
    # mouth to ear: it starts at the last voiced frame, so the VAD's wait is inside it
    split = h["stats"]["splits"][0]
    assert split["turn_detection"] > 0 and split["first_audio"] >= 0, split
    assert h["stats"]["latenciesMs"][0] >= split["turn_detection"] - 40, h["stats"]
    shown = demo.page.text_content("#split") or ""
    assert split["first_token"] <= split["first_clause"] <= split["first_audio"], split
    for phase in ("turn end", "transcribe", "first token", "first clause", "first audio sent"):
        assert phase in shown, shown
    assert demo.page.text_content("#state") == "connected"
    assert not h["stats"]["errors"] and not h["stats"]["truncates"], h
    demo.shot()


def test_settings_panel_and_barge_in(open_demo, tone_gateway, tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", TWO_BURSTS))
    # set before Talk: the page sends them as session.update once the session exists
    demo.page.fill("#instructions", "words=40")
    demo.page.fill("#silence", "400")
    demo.talk()
    demo.wait("__duplexDemo.stats.events['session.updated'] >= 1", 10)
    demo.wait("__duplexDemo.stats.truncates.length >= 1", 20)
    demo.wait("__duplexDemo.transcriptText('user').includes('tone turn 2')", 20)
    h = demo.hook()
    cut = h["stats"]["truncates"][0]
    # the reply (44 words, 8.8 s) was cut after ~2.5 s of playback: what was heard
    assert 200 < cut["audio_end_ms"] < 6000, cut
    demo.page.wait_for_timeout(500)
    # playback of the cut item stopped where it was truncated (turn 2's reply may play)
    assert demo.page.evaluate(f"__duplexDemo.playedMs({cut['itemId']!r})") == cut["audio_end_ms"]
    demo.wait("__duplexDemo.stats.events['conversation.item.truncated'] >= 1", 5)
    first = h["assistant"].split("\n")[0]
    assert "forty" not in first, h
    assert demo.page.locator("#transcript li.interrupted").count() >= 1
    assert h["stats"]["events"].get("input_audio_buffer.speech_started", 0) >= 2
    assert demo.page.input_value("#instructions") == "words=40"
    assert h["seqGaps"] == 0 and not h["stats"]["errors"], h
    demo.shot()


def test_expired_session_is_replaced_and_said(open_demo, tone_gateway, tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", [("silence", 1.0)]))
    demo.talk()
    demo.wait("__duplexDemo.state === 'connected'", 10)
    old = demo.page.evaluate("__duplexDemo.sessionId")
    # a resume of a session the gateway does not know is answered session_resume_expired
    demo.page.evaluate("__duplexDemo.dropSocket({resumeAs: 'sess_gone'})")
    demo.wait("__duplexDemo.stats.states.includes('expired')", 15)
    demo.wait("__duplexDemo.state === 'connected'", 10)
    new = demo.page.evaluate("__duplexDemo.sessionId")
    assert new and new not in (old, "sess_gone")
    assert "expired" in demo.page.text_content("#transcript")
    assert demo.hook()["seqGaps"] == 0
    demo.shot()


def test_dropped_socket_resumes_without_losing_the_turn(open_demo, tone_gateway,
                                                        tmp_path: Path) -> None:
    demo = open_demo(tone_gateway, write_wav(tmp_path / "mic.wav", ONE_BURST))
    demo.page.fill("#instructions", "words=20")  # 24 words, 4.8 s: time to drop mid-reply
    demo.talk()
    demo.wait("__duplexDemo.stats.audioDeltas >= 3", 20)
    seq_before = demo.page.evaluate("__duplexDemo.lastSeq")
    demo.page.evaluate("__duplexDemo.dropSocket()")
    demo.wait("__duplexDemo.state === 'resumed'", 15)
    assert "reconnecting" in demo.stats()["states"]
    demo.wait("__duplexDemo.stats.events['response.done'] >= 1", 20)
    demo.wait(f"__duplexDemo.stats.playedSamples >= {24 * SAMPLES_PER_WORD}", 15)
    h = demo.hook()
    assert h["reconnects"] == 1 and h["seqGaps"] == 0, h
    assert h["lastSeq"] > seq_before
    assert h["assistant"].strip().endswith("nineteen twenty"), h
    assert h["user"].startswith("tone turn 1,"), h
    assert demo.page.text_content("#state") == "resumed"
    assert not h["stats"]["errors"], h
    demo.shot()
