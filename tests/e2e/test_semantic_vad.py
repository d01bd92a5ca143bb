"""semantic_vad over a real socket: eagerness and the words so far move the end of a turn.

How long the gateway waited is read off the protocol, with no clock: a turn's
``transcription.completed`` reports the audio committed (``usage.seconds``),
which is all the audio sent up to the 20 ms frame on which the VAD decided;
``speech_stopped.audio_end_ms`` is where the speech ended. The difference is
the silence the gateway waited, to the frame. The tone plugin's VAD hears
pitch as words (``plugins.tone.words``): 200 Hz ends in "and", 2 kHz in "that
is all.", 440 Hz says nothing either way.
"""

from __future__ import annotations

from typing import Any

import pytest
from client import RealtimeClient, silence, tone
from gateway_process import GatewayProcess

SPEECH_S = 0.6


async def wait_after_speech_ms(gateway: GatewayProcess, turn_detection: dict[str, Any] | None,
                               freq: float = 440.0) -> int:
    """On a new session: speak once, return how much silence ended the turn (ms)."""
    c = await RealtimeClient.connect(gateway.ws)
    try:
        await c.until("session.created")
        if turn_detection is not None:
            await c.send("session.update", session={
                "type": "realtime", "instructions": "words=1",
                "audio": {"input": {"turn_detection": turn_detection}}})
            updated = await c.until("session.updated")
            assert updated["session"]["audio"]["input"]["turn_detection"]["type"] == \
                turn_detection["type"]
        await c.append(tone(SPEECH_S, freq))
        await c.append(silence(4.0))  # more than any window: only the VAD decides
        stopped = await c.until("input_audio_buffer.speech_stopped")
        heard = await c.until("conversation.item.input_audio_transcription.completed")
        assert heard["item_id"] == stopped["item_id"]
        assert stopped["audio_end_ms"] == SPEECH_S * 1000
        return round(heard["usage"]["seconds"] * 1000) - stopped["audio_end_ms"]
    finally:
        await c.close()


def semantic(eagerness: str) -> dict[str, Any]:
    return {"type": "semantic_vad", "eagerness": eagerness}


async def test_high_eagerness_ends_a_turn_sooner_than_low(gateway: GatewayProcess) -> None:
    waits = {e: await wait_after_speech_ms(gateway, semantic(e))
             for e in ("high", "medium", "auto", "low")}
    assert waits["high"] < waits["medium"] == waits["auto"] < waits["low"]
    # the windows of plugins.turn_end, decided on the first 20 ms frame past them
    assert waits == {"high": 360, "medium": 700, "auto": 700, "low": 1200}


@pytest.mark.parametrize(("freq", "expected_ms"), [(2000.0, 220), (440.0, 700),
                                                   (200.0, 1760)])
async def test_the_words_so_far_move_the_end(gateway: GatewayProcess, freq: float,
                                             expected_ms: int) -> None:
    assert await wait_after_speech_ms(gateway, semantic("medium"), freq) == expected_ms


async def test_server_vad_keeps_its_fixed_window(gateway: GatewayProcess) -> None:
    assert await wait_after_speech_ms(gateway, None) == 500  # the default, as before
    # and the words so far do not move it
    server = {"type": "server_vad", "silence_duration_ms": 400}
    for freq in (200.0, 2000.0):
        assert await wait_after_speech_ms(gateway, server, freq) == 400


async def test_instructions_sent_with_semantic_vad_take_effect(client: RealtimeClient) -> None:
    await client.send("session.update", session={
        "type": "realtime", "instructions": "Be terse. words=5", "tracing": "auto",
        "audio": {"input": {"noise_reduction": {"type": "near_field"},
                            "transcription": {"model": "gpt-4o-mini-transcribe",
                                              "language": "en"},
                            "turn_detection": {"type": "semantic_vad", "eagerness": "high"}},
                  "output": {"speed": 1.1}}})
    session = (await client.until("session.updated"))["session"]
    assert session["instructions"] == "Be terse. words=5"
    assert session["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": "high", "create_response": True,
        "interrupt_response": True}
    assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    assert session["audio"]["input"]["noise_reduction"] is None  # not done here: says so
    await client.append(tone(0.5))
    await client.append(silence(1.0))
    done = await client.until("response.done")
    words = done["response"]["output"][0]["content"][0]["transcript"].split()
    assert words == ["answer", "to", "turn", "1:", "one", "two", "three", "four", "five"]


async def test_beta_clients_ask_for_it_at_the_top_level(gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(gateway.ws,
                                     additional_headers={"OpenAI-Beta": "realtime=v1"})
    try:
        await c.until("session.created")
        await c.send("session.update", session={
            "instructions": "words=1", "input_audio_transcription": {"model": "whisper-1"},
            "turn_detection": {"type": "semantic_vad", "eagerness": "low",
                               "create_response": True}})
        session = (await c.until("session.updated"))["session"]
        assert session["instructions"] == "words=1"
        assert session["turn_detection"] == {"type": "semantic_vad", "eagerness": "low",
                                             "create_response": True,
                                             "interrupt_response": True}
        await c.append(tone(SPEECH_S))
        await c.append(silence(2.0))
        stopped = await c.until("input_audio_buffer.speech_stopped")
        heard = await c.until("conversation.item.input_audio_transcription.completed")
        assert round(heard["usage"]["seconds"] * 1000) - stopped["audio_end_ms"] == 1200
    finally:
        await c.close()
