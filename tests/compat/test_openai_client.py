"""The official ``openai`` Python package drives the gateway as it would OpenAI's Realtime API.

Everything goes through the SDK's own connection, typed client-event helpers and
typed server-event parsing; nothing here speaks raw JSON.
"""

from __future__ import annotations

import asyncio
import base64
import json
import typing
from typing import Any

import numpy as np
import pytest
from gateway_process import GatewayProcess
from openai import AsyncOpenAI, BaseModel
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemTruncatedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    RealtimeErrorEvent,
    RealtimeServerEvent,
    ResponseAudioDeltaEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)
from openai.types.realtime.realtime_server_event import ConversationItemRetrieved
from websockets.exceptions import ConnectionClosedError

from plugins.tone import decode_turn

RATE = 24000


def sdk(gateway: GatewayProcess, api_key: str = "x") -> AsyncOpenAI:
    return AsyncOpenAI(api_key=api_key, websocket_base_url=f"ws://{gateway.address}/v1")


def pcm16(seconds: float, freq: float = 440.0) -> bytes:
    t = np.arange(int(RATE * seconds)) / RATE
    wave = 0.3 * 32767 * np.sin(2 * np.pi * freq * t) if freq else 0 * t
    return wave.astype("<i2").tobytes()


async def say(conn: AsyncRealtimeConnection, seconds: float) -> None:
    """A tone and then silence, appended in 20 ms frames through the SDK."""
    audio = pcm16(seconds) + pcm16(0.8, freq=0)
    for start in range(0, len(audio), 960):
        await conn.input_audio_buffer.append(
            audio=base64.b64encode(audio[start:start + 960]).decode())


async def read_until(conn: AsyncRealtimeConnection, type_: str,
                     timeout: float = 15.0) -> list[RealtimeServerEvent]:
    """Typed events from ``async for event in conn`` up to and including one of ``type_``."""
    events: list[RealtimeServerEvent] = []
    async with asyncio.timeout(timeout):
        async for event in conn:
            assert isinstance(event, BaseModel), event  # the SDK parsed it into its model
            events.append(event)
            if event.type == type_:
                return events
    raise AssertionError(f"the connection ended before {type_}")


GA_SESSION = {
    "type": "realtime",
    "output_modalities": ["audio"],
    "instructions": "words=3",
    "audio": {
        "input": {"format": {"type": "audio/pcm", "rate": 24000},
                  "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}},
        "output": {"format": {"type": "audio/pcm", "rate": 24000}},
    },
}


async def test_voice_turn_through_the_openai_sdk(gateway: GatewayProcess) -> None:
    async with sdk(gateway).realtime.connect(model="duplex-gateway") as conn:
        created = await conn.recv()
        assert isinstance(created, SessionCreatedEvent)
        assert created.session.type == "realtime" and created.session.id
        await conn.session.update(session=GA_SESSION)  # type: ignore[arg-type]
        (updated,) = await read_until(conn, "session.updated")
        assert isinstance(updated, SessionUpdatedEvent)
        audio_in = updated.session.audio.input
        assert audio_in.format.type == "audio/pcm" and audio_in.format.rate == 24000
        assert audio_in.turn_detection.type == "server_vad"
        assert audio_in.turn_detection.silence_duration_ms == 300
        assert updated.session.instructions == "words=3"

        await say(conn, 1.0)
        events = await read_until(conn, "response.done")
        kinds = {type(e) for e in events}
        for model in (InputAudioBufferSpeechStartedEvent, InputAudioBufferCommittedEvent,
                      ConversationItemAdded, ResponseCreatedEvent, ResponseAudioDeltaEvent,
                      ResponseAudioTranscriptDeltaEvent, ResponseDoneEvent):
            assert model in kinds, model
        done = events[-1]
        assert isinstance(done, ResponseDoneEvent)
        assert done.response.status == "completed"
        deltas = [e for e in events if isinstance(e, ResponseAudioDeltaEvent)]
        assert all(e.response_id == done.response.id for e in deltas)
        audio = np.frombuffer(b"".join(base64.b64decode(e.delta) for e in deltas), "<i2")
        assert len(audio) == 7 * 4800  # "answer to turn 1: one two three", 200 ms a word
        assert decode_turn(audio[:4800], RATE) == 1
        words = "".join(e.delta for e in events
                        if isinstance(e, ResponseAudioTranscriptDeltaEvent))
        output = done.response.output[0]
        assert output.type == "message" and output.role == "assistant"
        assert output.content[0].transcript == words
        assert words.strip() == "answer to turn 1: one two three"


async def test_cancel_and_truncate_through_the_openai_sdk(gateway: GatewayProcess) -> None:
    async with sdk(gateway).realtime.connect(model="duplex-gateway") as conn:
        assert isinstance(await conn.recv(), SessionCreatedEvent)
        await conn.response.cancel(event_id="evt_idle")  # nothing to cancel yet
        (error,) = await read_until(conn, "error")
        assert isinstance(error, RealtimeErrorEvent)
        assert error.error.code == "response_cancel_not_active"
        assert error.error.type == "invalid_request_error"
        assert error.error.event_id == "evt_idle"

        await conn.session.update(session={"type": "realtime", "instructions": "words=60"})
        await read_until(conn, "session.updated")
        await say(conn, 1.0)
        first = (await read_until(conn, "response.output_audio.delta"))[-1]
        assert isinstance(first, ResponseAudioDeltaEvent)
        await conn.response.cancel()
        done = (await read_until(conn, "response.done"))[-1]
        assert isinstance(done, ResponseDoneEvent)
        assert done.response.id == first.response_id
        assert done.response.status == "cancelled"
        assert done.response.status_details is not None
        assert done.response.status_details.reason == "client_cancelled"
        sent = done.response.output[0].content[0].transcript
        assert sent and len(sent.split()) < 64  # cut short: not all 64 words went out

        item_id = first.item_id
        await conn.conversation.item.truncate(item_id=item_id, content_index=0,
                                              audio_end_ms=100)
        truncated = (await read_until(conn, "conversation.item.truncated"))[-1]
        assert isinstance(truncated, ConversationItemTruncatedEvent)
        assert (truncated.item_id, truncated.audio_end_ms) == (item_id, 100)
        await conn.conversation.item.retrieve(item_id=item_id)
        retrieved = (await read_until(conn, "conversation.item.retrieved"))[-1]
        assert isinstance(retrieved, ConversationItemRetrieved)
        assert retrieved.item.id == item_id and retrieved.item.status == "incomplete"
        heard = retrieved.item.content[0].transcript
        assert sent.startswith(heard) and len(heard) < len(sent)


async def test_api_key_in_the_sdks_bearer_header(keyed_gateway: GatewayProcess,
                                                 api_key: str) -> None:
    async with sdk(keyed_gateway, api_key).realtime.connect(model="duplex-gateway") as conn:
        assert isinstance(await conn.recv(), SessionCreatedEvent)
        await conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "hello"}]})
        added = (await read_until(conn, "conversation.item.added"))[-1]
        assert isinstance(added, ConversationItemAdded)
        assert added.item.role == "user"
        assert added.item.content[0].text == "hello"


async def test_wrong_api_key_through_the_sdk(keyed_gateway: GatewayProcess,
                                             api_key: str) -> None:
    async with sdk(keyed_gateway, "not-" + api_key).realtime.connect(
            model="duplex-gateway") as conn:
        refusal = await conn.recv()
        assert isinstance(refusal, RealtimeErrorEvent)
        assert refusal.error.code == "invalid_api_key"
        assert refusal.error.type == "invalid_request_error"
        with pytest.raises(ConnectionClosedError) as closed:
            await read_until(conn, "session.created", timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


# -- the events against the SDK's own schema, strictly --------------------------------


def _models_by_type() -> dict[str, type[BaseModel]]:
    union = typing.get_args(RealtimeServerEvent)[0]  # Annotated[Union[...], discriminator]
    return {name: model for model in typing.get_args(union)
            for name in typing.get_args(model.model_fields["type"].annotation)}


MODELS = _models_by_type()


async def raw_until(conn: AsyncRealtimeConnection, type_: str,
                    into: list[dict[str, Any]]) -> dict[str, Any]:
    async with asyncio.timeout(15):
        while True:
            event = json.loads(await conn.recv_bytes())
            into.append(event)
            if event["type"] == type_:
                return event


async def a_turn_of_raw_events(gateway: GatewayProcess) -> list[dict[str, Any]]:
    """Every server event of a session that speaks, truncates, retrieves and errs."""
    events: list[dict[str, Any]] = []
    async with sdk(gateway).realtime.connect(model="duplex-gateway") as conn:
        await raw_until(conn, "session.created", events)
        await conn.session.update(session={"type": "realtime", "instructions": "words=2"})
        await raw_until(conn, "session.updated", events)
        await say(conn, 0.5)
        done = await raw_until(conn, "response.done", events)
        await raw_until(conn, "rate_limits.updated", events)
        item_id = done["response"]["output"][0]["id"]
        await conn.conversation.item.truncate(item_id=item_id, content_index=0,
                                              audio_end_ms=100)
        await raw_until(conn, "conversation.item.truncated", events)
        await conn.conversation.item.retrieve(item_id=item_id)
        await raw_until(conn, "conversation.item.retrieved", events)
        await conn.response.cancel()
        await raw_until(conn, "error", events)
    return events


async def test_events_validate_against_the_sdk_schema(gateway: GatewayProcess) -> None:
    events = await a_turn_of_raw_events(gateway)
    seen = {e["type"] for e in events}
    assert seen >= {
        "session.created", "session.updated", "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
        "conversation.item.added", "conversation.item.done", "response.created",
        "response.output_item.added", "response.output_audio.delta",
        "response.output_audio_transcript.delta", "response.output_audio.done",
        "response.output_audio_transcript.done", "response.output_item.done",
        "response.done", "rate_limits.updated", "conversation.item.truncated",
        "conversation.item.retrieved", "error", "response.content_part.added",
        "response.content_part.done", "conversation.item.input_audio_transcription.completed"}
    for event in events:
        MODELS[event["type"]].model_validate(event)  # raises on any schema break
