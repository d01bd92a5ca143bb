"""The default voice agent over WebRTC: the committed spoken question
(``samples/question.wav``) said into the microphone track, the spoken answer heard
on the gateway's track (and heard right: Whisper transcribes it, after Opus both
ways), then the hang-up."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from cascade_agent import words
from client import journal, valkey
from gateway_process import REPO, GatewayProcess
from heard import FRAME_MS, heard_through, loud, loud_ms
from peer_client import PeerClient

from gateway.audio import resample

pytest.importorskip("xllamacpp", reason="the [cpu] extra (xllamacpp) is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUESTION = REPO / "samples" / "question.wav"


async def test_a_spoken_question_gets_a_spoken_answer_on_the_track(
        agent: GatewayProcess, ears: Any) -> None:
    pcm, rate = sf.read(str(QUESTION), dtype="int16")
    peer = await PeerClient.call(agent.http)
    try:
        assert (await peer.recv())["type"] == "session.created"
        peer.speak(np.concatenate([resample(pcm, rate, 24000), np.zeros(24000, np.int16)]))
        heard = await peer.until("conversation.item.input_audio_transcription.completed",
                                 timeout=120)
        assert {"capital", "france"} <= words(heard["transcript"]), heard
        done = await peer.until("response.done", timeout=180)
        assert done["response"]["status"] == "completed"
        transcript = done["response"]["output"][0]["content"][0]["transcript"]
        assert "paris" in words(transcript), transcript
        assert not peer.of("response.output_audio.delta")  # the audio came on the track
        # wait until the track has played past the reply's length (plus half a second
        # for the network), counted from its first loud frame after the call began: the
        # track is silent until the reply (the question went the other way), so neither
        # the events channel's timing nor Opus's edges move the count
        r = valkey(agent.data_dir)
        journaled = await journal(r, peer.events[0]["session"]["id"])
        await r.aclose()
        reply = np.concatenate([np.frombuffer(base64.b64decode(e["delta"]), "<i2")
                                for e in journaled
                                if e["type"] == "response.output_audio.delta"])
        frames = reply[:reply.size // 480 * 480].reshape(-1, 480)
        first = await heard_through(peer, len(frames) + 25)
        # and nothing of it was lost: the loud frames heard are the journal's, but for
        # those Opus moved across the floor
        journal_ms = FRAME_MS * sum(loud(f) for f in frames)
        assert loud_ms(peer, first) >= 0.8 * journal_ms, (loud_ms(peer, first), journal_ms)
        audio = peer.heard_since(first)
        said = ears.transcribe(resample(audio, 48000, 16000))
        # the answer, as heard through Opus twice: Whisper base makes a word of it
        # out now and then ("parrot", "Francis Paris"; the journal's own audio it
        # hears right, and the text is checked above), so most of the sentence is held
        heard_words = {w[:4] for w in words(said)}
        assert len(heard_words & {"the", "capi", "of", "fran", "is", "pari", "parr"}) >= 4, said
        assert heard_words & {"pari", "parr"} or "par" in said.lower(), said
        assert await peer.hang_up() == 204
    finally:
        await peer.close()
