"""``idle_timeout_ms`` over a real gateway: a caller who stays silent after a
reply's playback is prompted (``input_audio_buffer.timeout_triggered``, a
commit, a reply), and one who speaks first is not."""

from __future__ import annotations

import asyncio

from client import RealtimeClient, speak

IDLE_MS = 600


async def configured(c: RealtimeClient, idle_ms: int) -> None:
    await c.send("session.update", session={"instructions": "words=3", "turn_detection": {
        "type": "server_vad", "idle_timeout_ms": idle_ms}})
    updated = await c.until("session.updated")
    assert updated["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == idle_ms


async def test_a_silent_caller_is_prompted_after_the_reply_has_played(
        client: RealtimeClient) -> None:
    await configured(client, IDLE_MS)
    await speak(client)
    first = await client.until("response.created")
    audio_ms = 0.0
    while (event := await client.recv())["type"] != "response.done":
        if event["type"] == "response.output_audio.delta":
            audio_ms += len(event["delta"]) * 3 / 4 / 48  # base64 → bytes → ms at 24 kHz
    done_at = asyncio.get_running_loop().time()
    assert audio_ms >= 1000  # words=3 with its preamble: seven 200 ms words
    triggered = await client.until("input_audio_buffer.timeout_triggered", timeout=15)
    waited = asyncio.get_running_loop().time() - done_at
    # not before the playback (sent up to --output-lead-ms ahead) plus the timeout
    assert waited >= IDLE_MS / 1000
    committed = await client.recv()
    assert committed["type"] == "input_audio_buffer.committed"
    assert committed["item_id"] == triggered["item_id"]
    prompt = await client.until("response.created")
    assert prompt["response"]["id"] != first["response"]["id"]
    await client.until("response.done")


async def test_speech_before_the_timeout_is_a_turn_not_a_timeout(
        client: RealtimeClient) -> None:
    await configured(client, 10_000)
    await speak(client)
    await client.until("response.done")
    await speak(client)  # well inside the 10 s: the caller answers
    await client.until("input_audio_buffer.speech_started")
    await client.until("response.done")
    assert not client.of("input_audio_buffer.timeout_triggered")
