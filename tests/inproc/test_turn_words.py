"""semantic_vad with the listener's words: a finished question ends the turn at
the short window, a dangling one waits (``tests/inproc/drafting_plugin.py``).

No clock is read: each test sends the speech and a pause, waits for the words
the listener drafted at that pause to reach the session's VAD, and reads how
long the gateway waited off the protocol (as ``tests/e2e/test_semantic_vad.py``
does): the audio the turn committed (``usage.seconds`` of its transcript) less
where the speech ended (``speech_stopped.audio_end_ms``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import drafting_plugin as dp
import numpy as np
import pytest
from client import b64, silence, tone
from harness import MemorySocket, connect, running_app
from starlette.applications import Starlette

from gateway.gateway import Gateway

SPEECH_S = 0.6
FRAME_MS = 32  # the VAD's


@pytest.fixture
async def app(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Starlette, Gateway]]:
    async with running_app(redis_url, tmp_path,
                           plugin="drafting_plugin:DraftingPlugin") as pair:
        yield pair


async def session(app: Starlette, turn_detection: dict[str, Any]) -> MemorySocket:
    s = await connect(app)
    await s.until("session.created")
    s.send({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}})
    await s.until("session.updated")
    dp.heard.clear()
    dp.words_arrived = asyncio.Event()  # this test's loop's
    return s


def append(s: MemorySocket, pcm: np.ndarray) -> None:
    for start in range(0, pcm.size, 2400):  # 100 ms an append
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + 2400])})


async def words_heard() -> list[str]:
    await dp.words_arrived.wait()
    dp.words_arrived.clear()
    return list(dp.heard)


async def processed(s: MemorySocket) -> list[str]:
    """The types of the events up to the point where the session has handled
    everything sent before (a ``session.update`` answered in order)."""
    start = len(s.events)
    s.send({"type": "session.update", "session": {"type": "realtime", "instructions": "x"}})
    await s.until("session.updated")
    return [e["type"] for e in s.events[start:]]


async def waited_ms(s: MemorySocket) -> tuple[int, int]:
    """How long the gateway waited after the speech (ms), and the audio committed."""
    stopped = await s.until("input_audio_buffer.speech_stopped")
    heard = await s.until("conversation.item.input_audio_transcription.completed")
    end = stopped["audio_end_ms"]
    assert SPEECH_S * 1000 <= end < SPEECH_S * 1000 + FRAME_MS
    committed = round(heard["usage"]["seconds"] * 1000)
    return committed - end, committed


def decided_past(window_ms: int, waited: int) -> bool:
    """On the append (100 ms) whose VAD frame (32 ms) first passed the window."""
    return window_ms <= waited < window_ms + 100 + FRAME_MS


SEMANTIC = {"type": "semantic_vad", "eagerness": "auto"}  # 700 ms without words


async def test_a_finished_question_ends_the_turn_when_its_words_are_heard(
        app: tuple[Starlette, Gateway]) -> None:
    s = await session(app[0], SEMANTIC)
    append(s, np.concatenate((tone(SPEECH_S, 2000.0), silence(0.3))))
    assert await words_heard() == [dp.FINISHED]
    # the silence sent is past the finished window (210 ms), short of the base
    # one: the words ended the turn, with no more audio
    waited, committed = await waited_ms(s)
    assert committed == 900 and 210 <= waited < 700
    done = s.of("conversation.item.input_audio_transcription.completed")[-1]
    assert done["transcript"] == dp.FINISHED  # the draft's words are the turn's


async def test_a_dangling_question_waits(app: tuple[Starlette, Gateway]) -> None:
    s = await session(app[0], SEMANTIC)
    append(s, np.concatenate((tone(SPEECH_S, 200.0), silence(0.3))))
    assert await words_heard() == [dp.DANGLING]
    append(s, silence(1.0))  # 1.3 s of silence: past the base window (700 ms)
    assert "input_audio_buffer.speech_stopped" not in await processed(s)
    append(s, silence(0.6))  # past the stretched window (1750 ms)
    assert decided_past(1750, (await waited_ms(s))[0])


async def test_words_with_no_cue_keep_the_base_window(app: tuple[Starlette, Gateway]) -> None:
    s = await session(app[0], SEMANTIC)
    append(s, np.concatenate((tone(SPEECH_S, 440.0), silence(0.3))))
    assert await words_heard() == [dp.NEUTRAL]
    append(s, silence(0.6))
    assert decided_past(700, (await waited_ms(s))[0])


async def test_server_vad_keeps_its_fixed_window(app: tuple[Starlette, Gateway]) -> None:
    s = await session(app[0], {"type": "server_vad", "silence_duration_ms": 500})
    append(s, np.concatenate((tone(SPEECH_S, 2000.0), silence(0.3))))
    assert await words_heard() == [dp.FINISHED]
    assert "input_audio_buffer.speech_stopped" not in await processed(s)
    append(s, silence(0.3))
    assert decided_past(500, (await waited_ms(s))[0])
