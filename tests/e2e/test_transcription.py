"""Transcription-only sessions, in both dialects: the user's words as
transcription events, and no replies (OpenAI's ``type: "transcription"``,
``?intent=transcription`` and beta's ``transcription_session.update``)."""

from __future__ import annotations

from client import RealtimeClient, expect_error, speak
from gateway_process import GatewayProcess

REPLY_EVENTS = ("response.created", "response.output_audio.delta", "response.done")


async def heard_without_reply(c: RealtimeClient) -> dict[str, object]:
    """Speak one turn; its transcript comes (delta, then completed) and no reply does."""
    start = len(c.events)
    await speak(c)
    done = await c.until("conversation.item.input_audio_transcription.completed")
    await c.send("session.heartbeat")  # anything the server sends after it is in order
    await c.until("session.heartbeat_ack")
    kinds = [e["type"] for e in c.events[start:]]
    assert "input_audio_buffer.committed" in kinds
    delta = kinds.index("conversation.item.input_audio_transcription.delta")
    assert delta < kinds.index("conversation.item.input_audio_transcription.completed")
    assert not any(k in REPLY_EVENTS for k in kinds), kinds
    return done


async def test_a_session_opened_for_transcription_only_transcribes(
        gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(f"{gateway.ws}?intent=transcription")
    created = await c.recv()
    session = created["session"]
    assert (session["type"], session["object"]) == ("transcription",
                                                    "realtime.transcription_session")
    assert session["audio"]["input"]["transcription"] == {"model": "default"}
    done = await heard_without_reply(c)
    assert "ms of speech" in str(done["transcript"])
    await c.send("response.create")
    error = await expect_error(c, "invalid_value")
    assert error["error"]["param"] == "type"
    await c.close()


async def test_a_realtime_session_becomes_a_transcription_session(
        client: RealtimeClient) -> None:
    await client.send("session.update", session={
        "type": "transcription",
        "audio": {"input": {"transcription": {"model": "whisper-1"}}}})
    updated = await client.until("session.updated")
    assert updated["session"]["type"] == "transcription"
    assert "output_modalities" not in updated["session"]
    await heard_without_reply(client)


async def test_beta_transcription_session_update(gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(gateway.ws,
                                     additional_headers={"OpenAI-Beta": "realtime=v1"})
    await c.until("session.created")
    await c.send("transcription_session.update", session={
        "input_audio_transcription": {"model": "gpt-4o-mini-transcribe"},
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}})
    updated = await c.until("transcription_session.updated")
    assert updated["session"]["object"] == "realtime.transcription_session"
    assert updated["session"]["input_audio_transcription"] == {
        "model": "gpt-4o-mini-transcribe"}
    await heard_without_reply(c)
    await c.close()
