"""Bad client input over a real socket: one specific ``error`` each, and nothing else breaks.

Every case checks three things: the error event (code, OpenAI error type, param,
echoed ``event_id``), that the SAME connection still serves commands afterwards
(``still_works``), and that another session, mid-reply while the bad input
arrives, still completes its own turn with the right audio.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from client import (
    RealtimeClient,
    expect_error,
    reply_pcm,
    silence,
    speak,
    still_works,
    tone,
)
from gateway_process import GatewayProcess
from websockets.exceptions import ConnectionClosedOK

from plugins.tone import decode_turn

SMALL_LIMIT = 65536


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway that refuses client messages over 64 KiB."""
    proc = GatewayProcess(Path(tmp_path_factory.mktemp("small")),
                          args=["--plugin", "tone", "--output-lead-ms", "300",
                                "--max-message-bytes", str(SMALL_LIMIT)]).start()
    try:
        yield proc
    finally:
        proc.stop()


async def bystander_turn(url: str, streaming: asyncio.Event) -> None:
    """A second session's whole voice turn; ``streaming`` is set once its reply has begun."""
    c = await RealtimeClient.connect(url)
    try:
        assert (await c.recv())["type"] == "session.created"
        await c.send("session.update", session={"instructions": "words=1", "audio": {
            "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}}})
        await c.until("session.updated")
        await c.append(tone(0.3))
        await c.append(silence(0.3))
        created = await c.until("response.created")
        streaming.set()
        done = await c.until("response.done")
        assert done["response"]["id"] == created["response"]["id"]
        assert done["response"]["status"] == "completed"
        assert not c.of("error"), c.of("error")
        audio = reply_pcm(c.events, done["response"]["id"])
        assert len(audio) == 5 * 4800  # "answer to turn 1: one", 200 ms a word
        assert decode_turn(audio[:4800], 24000) == 1
        transcript = done["response"]["output"][0]["content"][0]["transcript"]
        assert transcript.strip() == "answer to turn 1: one"
    finally:
        await c.close()


async def alongside_bystander(url: str, case: Callable[[], Awaitable[None]]) -> None:
    """Run ``case`` while another session on ``url`` is streaming a reply."""
    streaming = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(bystander_turn(url, streaming))
        await asyncio.wait_for(streaming.wait(), 10)
        await case()


def frame(**fields: object) -> str:
    return json.dumps(fields)


# raw text frame, error code, error param, echoed event_id
CASES = [
    pytest.param('{"type": "session.update", "session": ', "invalid_json", None, None,
                 id="invalid_json"),
    pytest.param('{"type": "playback.ack", "played_ms": NaN, "event_id": "evt_nan"}',
                 "invalid_json", None, None, id="nan_is_not_json"),
    pytest.param('[{"type": "session.update"}]', "invalid_event", None, None,
                 id="not_an_object"),
    pytest.param(frame(type="session.frobnicate", event_id="evt_unknown"), "invalid_value",
                 "type", "evt_unknown", id="unknown_event"),
    pytest.param(frame(event_id="evt_notype", session={}), "missing_required_parameter",
                 "type", "evt_notype", id="missing_type"),
    pytest.param(frame(type="conversation.item.truncate", event_id="evt_trunc",
                       content_index=0, audio_end_ms=10),
                 "missing_required_parameter", "item_id", "evt_trunc",
                 id="truncate_without_item_id"),
    pytest.param(frame(type="input_audio_buffer.append", event_id="evt_noaudio"),
                 "missing_required_parameter", "audio", "evt_noaudio",
                 id="append_without_audio"),
    pytest.param(frame(type="session.update", event_id="evt_nosession"),
                 "missing_required_parameter", "session", "evt_nosession",
                 id="update_without_session"),
    pytest.param(frame(type="input_audio_buffer.append", event_id="evt_b64",
                       audio="this is *not* base64!"),
                 "invalid_base64", "audio", "evt_b64", id="bad_base64"),
    pytest.param(frame(type="input_audio_buffer.append", event_id="evt_odd",
                       audio=base64.b64encode(b"\x01\x02\x03").decode()),
                 "invalid_audio", None, "evt_odd", id="odd_length_pcm16"),
    pytest.param(frame(type="session.update", event_id="evt_flac", session={
        "type": "realtime", "audio": {"input": {"format": {"type": "audio/flac"}}}}),
                 "invalid_value", "session.audio.input.format.type", "evt_flac",
                 id="flac_input_format"),
    pytest.param(frame(type="session.update", event_id="evt_rate", session={
        "audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}}),
                 "invalid_value", "session.audio.output.format.rate", "evt_rate",
                 id="pcm_at_16khz"),
    pytest.param(frame(type="session.update", event_id="evt_beta_fmt",
                       session={"input_audio_format": "mp3"}),
                 "invalid_value", "session.input_audio_format", "evt_beta_fmt",
                 id="beta_mp3_format"),
    pytest.param(frame(type="response.cancel", event_id="evt_cancel"),
                 "response_cancel_not_active", None, "evt_cancel", id="cancel_nothing_active"),
    pytest.param(frame(type="input_audio_buffer.commit", event_id="evt_commit"),
                 "input_audio_buffer_commit_empty", None, "evt_commit", id="commit_empty"),
    pytest.param(frame(type="conversation.item.retrieve", event_id="evt_get",
                       item_id="item_nope"),
                 "item_retrieve_invalid_item_id", "item_id", "evt_get",
                 id="retrieve_unknown_item"),
    pytest.param(frame(type="conversation.item.delete", event_id="evt_del",
                       item_id="item_nope"),
                 "item_delete_invalid_item_id", "item_id", "evt_del",
                 id="delete_unknown_item"),
]


@pytest.mark.parametrize(("raw", "code", "param", "event_id"), CASES)
async def test_bad_message_gets_one_error_and_nothing_else_breaks(
        gateway: GatewayProcess, client: RealtimeClient, raw: str, code: str,
        param: str | None, event_id: str | None) -> None:
    async def case() -> None:
        await client.ws.send(raw)
        error = await expect_error(client, code)
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == param
        assert error["error"]["event_id"] == event_id
        # the error is a journaled server event like any other: the server's own id
        assert error["event_id"] != event_id and error["server_event_seq"] >= 2
        await still_works(client)  # and no second error came first

    await alongside_bystander(gateway.ws, case)


async def test_failed_format_update_changes_nothing(client: RealtimeClient) -> None:
    await client.send("session.update", event_id="evt_flac", session={
        "instructions": "words=3", "audio": {"input": {"format": {"type": "audio/flac"}}}})
    await expect_error(client, "invalid_value")
    await client.send("session.update", session={"voice": "other"})
    session = (await client.until("session.updated"))["session"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["instructions"] == ""  # the refused update was applied not even in part
    assert session["audio"]["output"]["voice"] == "other"


async def test_audio_errors_leave_the_input_stream_usable(client: RealtimeClient) -> None:
    await client.send("input_audio_buffer.append", event_id="evt_odd",
                      audio=base64.b64encode(b"\x00" * 961).decode())
    assert (await expect_error(client, "invalid_audio"))["error"]["event_id"] == "evt_odd"
    await client.send("input_audio_buffer.append", event_id="evt_b64", audio="%%%%")
    assert (await expect_error(client, "invalid_base64"))["error"]["event_id"] == "evt_b64"
    await client.ws.send(b"\x00" * 5)  # a binary frame is PCM16 too: odd is invalid
    assert (await expect_error(client, "invalid_audio"))["error"]["event_id"] is None
    await speak(client, 1.0)
    done = await client.until("response.done")
    assert done["response"]["status"] == "completed"
    assert len(client.of("error")) == 3
    assert decode_turn(reply_pcm(client.events, done["response"]["id"])[:4800], 24000) == 1


async def test_binary_pcm16_frames_are_input_audio(client: RealtimeClient) -> None:
    pcm = np.concatenate([tone(1.0), silence(0.8)]).astype("<i2").tobytes()
    step = 960  # 20 ms of 24 kHz PCM16
    for start in range(0, len(pcm), step):
        await client.ws.send(pcm[start:start + step])
    started = await client.until("input_audio_buffer.speech_started")
    committed = await client.until("input_audio_buffer.committed")
    assert committed["item_id"] == started["item_id"]
    done = await client.until("response.done")
    assert done["response"]["status"] == "completed"
    assert not client.of("error")
    transcript = client.of("conversation.item.input_audio_transcription.completed")[0]
    assert transcript["item_id"] == committed["item_id"]
    assert "tone turn" in transcript["transcript"]
    assert decode_turn(reply_pcm(client.events, done["response"]["id"])[:4800], 24000) == 1


async def test_response_create_while_one_is_active(gateway: GatewayProcess,
                                                   client: RealtimeClient) -> None:
    async def case() -> None:
        await client.send("session.update", session={"instructions": "words=60"})
        await client.until("session.updated")
        await client.send("response.create", event_id="evt_first")
        first = (await client.until("response.created"))["response"]
        await client.until("response.output_audio.delta")  # it is really under way
        await client.send("response.create", event_id="evt_second")
        error = await expect_error(client, "conversation_already_has_active_response")
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["event_id"] == "evt_second"
        assert first["id"] in error["error"]["message"]
        await still_works(client)
        assert len(client.of("response.created")) == 1  # the refused one never started
        await client.send("response.cancel", event_id="evt_stop")
        done = await client.until("response.done")
        assert done["response"]["id"] == first["id"]
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "client_cancelled"
        await client.send("response.cancel", event_id="evt_again")
        again = await expect_error(client, "response_cancel_not_active")
        assert again["error"]["event_id"] == "evt_again"
        await still_works(client)

    await alongside_bystander(gateway.ws, case)


async def test_commands_after_session_close_never_crash_and_the_socket_closes(
        gateway: GatewayProcess, client: RealtimeClient) -> None:
    async def case() -> None:
        await client.send("session.close", event_id="evt_close", reason="done talking")
        closed = await client.until("session.closed")
        assert closed["reason"] == "done talking"
        # What the code does: a command that reaches the reader before the session has
        # fully ended is dropped unanswered; one arriving after that, within 50 ms of the
        # last, gets error session_closed; then the server closes with 1000. Either way
        # the late command is never executed and the close is clean.
        try:
            await client.send("session.heartbeat", event_id="evt_late")
            late = await client.recv(5)
        except ConnectionClosedOK:
            pass
        else:
            assert late["type"] == "error"
            assert late["error"]["code"] == "session_closed"
            assert late["error"]["type"] == "invalid_request_error"
        await asyncio.wait_for(client.ws.wait_closed(), 5)
        assert client.ws.close_code == 1000
        with pytest.raises(ConnectionClosedOK):
            await client.recv(5)
        assert not client.of("session.heartbeat_ack")
        assert len(client.of("session.closed")) == 1

    await alongside_bystander(gateway.ws, case)
    assert not [line for line in gateway.output if "Traceback" in line]


async def test_command_right_after_session_closed_is_refused_with_its_event_id(
        client: RealtimeClient) -> None:
    await client.send("session.close")
    await client.until("session.closed")
    await client.send("session.heartbeat", event_id="evt_late")
    late = await client.recv(5)  # today: ConnectionClosedOK, nothing was answered
    assert late["type"] == "error"
    assert late["error"]["code"] == "session_closed"
    assert late["error"]["event_id"] == "evt_late"


def append_of_size(size: int) -> str:
    """An ``input_audio_buffer.append`` text frame of exactly ``size`` bytes."""
    audio = base64.b64encode(b"\x00" * ((size - 200) // 8 * 6)).decode()  # even, no padding
    head = frame(type="input_audio_buffer.append", audio=audio, event_id="")
    pad = size - len(head.encode())
    assert pad >= 0
    text = frame(type="input_audio_buffer.append", audio=audio, event_id="x" * pad)
    assert len(text.encode()) == size
    return text


async def test_oversized_message_is_refused_and_nothing_else_breaks(
        small_gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(small_gateway.ws)
    try:
        assert (await c.recv())["type"] == "session.created"

        async def case() -> None:
            await c.ws.send(append_of_size(SMALL_LIMIT + 1))
            error = await expect_error(c, "event_too_large")
            assert error["error"]["type"] == "invalid_request_error"
            assert str(SMALL_LIMIT) in error["error"]["message"]
            await still_works(c)
            await c.ws.send(b"\x00" * (SMALL_LIMIT + 2))  # binary frames are held to it too
            await expect_error(c, "event_too_large")
            await still_works(c)

        await alongside_bystander(small_gateway.ws, case)
    finally:
        await c.close()


async def test_message_of_exactly_the_limit_is_accepted(small_gateway: GatewayProcess) -> None:
    c = await RealtimeClient.connect(small_gateway.ws)
    try:
        assert (await c.recv())["type"] == "session.created"
        await c.send("session.update", session={"audio": {"input": {"turn_detection": None}}})
        await c.until("session.updated")
        await c.ws.send(append_of_size(SMALL_LIMIT))
        await c.ws.send(b"\x00" * SMALL_LIMIT)
        await c.send("input_audio_buffer.commit", event_id="evt_commit")
        committed = await c.until("input_audio_buffer.committed")
        assert committed["item_id"]
        assert not c.of("error")
        await still_works(c)
    finally:
        await c.close()
