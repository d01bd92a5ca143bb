"""While the store is full (``StoreWatch.full``) a session starts no new turn: a
speech start heard then is answered with ``store_full`` and is not a turn, nor is
its stop; once the store has room, speech is a turn again (docs/store.md)."""

from __future__ import annotations

import numpy as np
from client import b64, silence, tone
from harness import MemorySocket, connect
from starlette.applications import Starlette

from gateway.gateway import Gateway

FRAME = 480  # 20 ms at 24 kHz


def speak(s: MemorySocket) -> None:
    pcm = np.concatenate([tone(1.0), silence(0.8)])
    for start in range(0, len(pcm), FRAME):
        s.send({"type": "input_audio_buffer.append", "audio": b64(pcm[start:start + FRAME])})


async def test_speech_heard_while_the_store_is_full_is_no_turn(
        app: tuple[Starlette, Gateway]) -> None:
    s = await connect(app[0])
    sid = (await s.until("session.created"))["session"]["id"]
    machine = app[1].runners[sid].machine
    machine.store_full = lambda: True
    speak(s)
    error = await s.until("error")
    assert error["error"]["code"] == "store_full"
    s.send({"type": "session.heartbeat"})  # a sync point: the start was not a turn
    await s.until("session.heartbeat_ack")
    assert not s.of("input_audio_buffer.speech_started")
    assert not s.of("input_audio_buffer.committed")
    machine.store_full = lambda: False
    speak(s)
    await s.until("input_audio_buffer.speech_started")
    await s.until("input_audio_buffer.committed")
    await s.until("response.done", 30)
