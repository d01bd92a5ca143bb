"""The same question appended as `call` sends it (even 20 ms frames) and as the
browser demo does (the capture worklet's 128-sample quanta, posted in uneven
bursts) is the same turn to the gateway: the VAD's end of speech, the audio the
listener drafted at the pause, the words, and the audio the turn committed
(``tests/inproc/drafting_plugin.py``: the cascade's listener and VAD, a
recogniser that hears pitch).

No clock is read: each session gets the speech and a pause shorter than the
window its words call for, the test waits for the words the listener drafted
at that pause, then sends more silence, and reads the rest off the protocol,
as ``test_turn_words.py`` does. The speech ends inside a unit, at another phase
of the units in each of the lead-ins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import drafting_plugin as dp
import numpy as np
import pytest
from client import b64, silence, tone
from harness import MemorySocket, running_app
from starlette.applications import Starlette
from test_turn_words import processed, session, words_heard

from gateway.gateway import Gateway

SEMANTIC = {"type": "semantic_vad", "eagerness": "auto"}
WINDOW_MS = 210  # plugins.turn_end: auto's 700 ms after finished words
FRAME_MS = 32  # the VAD's
CALL = [480]  # 20 ms at 24 kHz
# a worklet's quanta as a busy main thread posts them: 1 to 7 at a time
DEMO = [128 * n for n in (3, 4, 1, 7, 2, 5, 4, 2, 6, 3)]


@pytest.fixture
async def app(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path,
                           plugin="drafting_plugin:DraftingPlugin") as pair:
        yield pair


def send(s: MemorySocket, pcm: np.ndarray, sizes: Sequence[int]) -> None:
    """``pcm`` as appends of ``sizes`` samples in turn (repeated)."""
    start, i = 0, 0
    while start < pcm.size:
        size = sizes[i % len(sizes)]
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + size])})
        start, i = start + size, i + 1


async def one_turn(app: Starlette, lead_ms: int, sizes: Sequence[int]) -> dict[str, object]:
    s = await session(app, SEMANTIC)
    dp.transcribed.clear()
    # the pause drafts (100 ms) before the finished words' window (210 ms) is over
    send(s, np.concatenate((silence(0.3 + lead_ms / 1000), tone(0.613, 2000.0),
                            silence(0.16))), sizes)
    assert await words_heard() == [dp.FINISHED]
    send(s, silence(0.3), sizes)
    stopped = await s.until("input_audio_buffer.speech_stopped")
    done = await s.until("conversation.item.input_audio_transcription.completed")
    await processed(s)  # and nothing after it: one stop, one turn
    assert len(s.of("input_audio_buffer.speech_stopped")) == 1
    waited = round(done["usage"]["seconds"] * 1000) - stopped["audio_end_ms"]
    # decided on the VAD frame (32 ms) that passed the finished window, in the
    # append that brought it (up to 7 quanta, 37 ms, in the demo's bursts)
    assert WINDOW_MS <= waited < WINDOW_MS + FRAME_MS + 1000 * max(sizes) // 24000 + 1, waited
    return {"audio_end_ms": stopped["audio_end_ms"], "drafted": list(dp.transcribed),
            "transcript": done["transcript"]}


@pytest.mark.parametrize("lead_ms", [0, 7, 13, 50])
async def test_call_frames_and_demo_bursts_make_the_same_turn(
        app: tuple[Starlette, Gateway], lead_ms: int) -> None:
    call = await one_turn(app[0], lead_ms, CALL)
    demo = await one_turn(app[0], lead_ms, DEMO)
    # one draft, at the pause, of the same audio; the same end of speech and words
    assert len(call["drafted"]) == 1 and call["transcript"] == dp.FINISHED
    assert demo == call
