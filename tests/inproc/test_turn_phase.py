"""The same question appended as `call` sends it (even 20 ms frames) and as the
browser demo does (the capture worklet's 128-sample quanta, posted in uneven
bursts) is the same turn to the gateway: the VAD's end of speech, the audio the
listener drafted at the pause, the words, and the audio the turn committed
(``tests/inproc/drafting_plugin.py``: the cascade's listener and VAD, a
recogniser that hears pitch).

No clock is read: each session gets the speech and a pause, the test waits for
the words the listener drafted at that pause, and reads the rest off the
protocol, as ``test_turn_words.py`` does. The speech ends inside a unit, at
another phase of the units in each of the lead-ins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import drafting_plugin as dp
import numpy as np
import pytest
from client import b64, silence, tone
from harness import running_app
from starlette.applications import Starlette
from test_turn_words import processed, session, words_heard

from gateway.gateway import Gateway

SEMANTIC = {"type": "semantic_vad", "eagerness": "auto"}
CALL = [480]  # 20 ms at 24 kHz
# a worklet's quanta as a busy main thread posts them: 1 to 7 at a time
DEMO = [128 * n for n in (3, 4, 1, 7, 2, 5, 4, 2, 6, 3)]


@pytest.fixture
async def app(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path,
                           plugin="drafting_plugin:DraftingPlugin") as pair:
        yield pair


async def one_turn(app: Starlette, pcm: np.ndarray, sizes: Sequence[int]) -> dict[str, object]:
    s = await session(app, SEMANTIC)
    dp.transcribed.clear()
    start = 0
    for i in range(pcm.size):
        if start >= pcm.size:
            break
        size = sizes[i % len(sizes)]
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + size])})
        start += size
    assert await words_heard() == [dp.FINISHED]
    done = await s.until("conversation.item.input_audio_transcription.completed")
    await processed(s)  # and nothing after it: one stop, one turn
    [stopped] = s.of("input_audio_buffer.speech_stopped")
    return {"audio_end_ms": stopped["audio_end_ms"], "drafted": list(dp.transcribed),
            "transcript": done["transcript"], "committed_s": done["usage"]["seconds"]}


@pytest.mark.parametrize("lead_ms", [0, 7, 13, 50])
async def test_call_frames_and_demo_bursts_make_the_same_turn(
        app: tuple[Starlette, Gateway], lead_ms: int) -> None:
    pcm = np.concatenate((silence(0.3 + lead_ms / 1000), tone(0.613, 2000.0), silence(0.3)))
    call = await one_turn(app[0], pcm, CALL)
    demo = await one_turn(app[0], pcm, DEMO)
    # one draft, at the pause, of the same audio: the words ended the turn
    assert len(call["drafted"]) == 1 and call["transcript"] == dp.FINISHED
    assert demo == call
