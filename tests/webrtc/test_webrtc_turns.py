"""A WebRTC call on the tone plugin: a spoken turn through the Opus tracks, a
barge-in truncated to what was played, the multipart ``session``, hang-up, and a
dropped peer's session resumed over the WebSocket."""

from __future__ import annotations

import httpx
import numpy as np
from client import (
    RealtimeClient,
    detached,
    eventually,
    journal,
    meta,
    resume,
    silence,
    still_works,
    tone,
)
from client import valkey as valkey_of
from gateway_process import GatewayProcess
from heard import heard_at_least, loud_audio, loud_ms
from peer_client import PeerClient

from plugins.tone import decode_turn

RATE = 48000
INPUT_ORDER = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
               "input_audio_buffer.committed", "conversation.item.added"]
RESPONSE_ORDER = ["response.created", "response.output_item.added", "conversation.item.added",
                  "response.content_part.added"]


def spoken(seconds: float, freq: float = 440.0) -> np.ndarray:
    return np.concatenate([tone(seconds, freq), silence(0.8)])


async def test_a_spoken_turn_is_heard_on_the_track(call: PeerClient,
                                                   gateway: GatewayProcess) -> None:
    call.speak(spoken(1.2))
    done = await call.until("response.done")
    types = [e["type"] for e in call.events]
    assert [t for t in types if t in INPUT_ORDER][:4] == INPUT_ORDER
    created_at = types.index("response.created")
    assert types[created_at:created_at + 4] == RESPONSE_ORDER
    assert done["response"]["status"] == "completed"
    # the WebSocket dialect's journal, event for event, but for the audio deltas: they
    # went on the track (their seqs are the only gaps the channel shows)
    r = valkey_of(gateway.data_dir)
    journaled = await journal(r, call.events[0]["session"]["id"])
    await r.aclose()
    assert "response.output_audio.delta" not in types
    assert [e for e in journaled[:len(call.events) + 200]
            if e["type"] != "response.output_audio.delta"][:len(call.events)] == call.events
    assert "response.output_audio.done" in types
    words = "".join(e["delta"] for e in call.of("response.output_audio_transcript.delta"))
    assert words.startswith("answer to turn 1")
    # and the reply is heard: the tone that answers turn 1, through Opus
    await heard_at_least(call, 400)
    assert decode_turn(loud_audio(call)[:RATE // 5], RATE) == 1


async def test_barge_in_truncates_the_reply_to_what_was_played(call: PeerClient) -> None:
    call.send("session.update", session={"instructions": "words=60"})  # a 12 s reply
    await call.until("session.updated")
    call.speak(spoken(1.0))
    first = await call.until("response.created")
    heard_before = await heard_at_least(call, 600)
    call.speak(spoken(0.6, freq=660))  # the user talks over the reply
    await call.until("input_audio_buffer.speech_started")
    cancelled = await call.until("response.done")
    assert cancelled["response"]["id"] == first["response"]["id"]
    assert cancelled["response"]["status"] == "cancelled"
    truncated = await call.until("conversation.item.truncated")
    item_id = cancelled["response"]["output"][0]["id"]
    assert truncated["item_id"] == item_id
    # truncated where the track stopped playing: at least what this client had heard
    # when it spoke up, less one frame, and far short of the whole reply
    assert heard_before - 20 <= truncated["audio_end_ms"] < 60 * 200
    played = truncated["audio_end_ms"]
    call.send("conversation.item.retrieve", item_id=item_id)
    item = (await call.until("conversation.item.retrieved"))["item"]
    assert 0 < len(item["content"][0]["transcript"].split()) < 60
    # the next reply answers turn 2; the old one's audio stopped with the truncate
    nxt = await call.until("response.done")
    assert nxt["response"]["status"] == "completed"
    # the track went quiet at the barge-in and stays so until reply 2, which comes
    # after the barge-in's speech_stopped: frames are split there, not at the events
    # channel's response.created, which on a busy box can arrive after the reply's
    # first frames (the track and the channel are separate streams)
    mark = call.frames_by(call.of("input_audio_buffer.speech_stopped")[-1])
    await heard_at_least(call, 400, since=mark)
    assert decode_turn(loud_audio(call, mark)[:RATE // 5], RATE) == 2
    # what was heard of the first reply (the call's only audio before the split) is
    # what was played of it, give or take the frames at either edge: the rest was
    # never sent
    assert abs(loud_ms(call, 0, mark) - played) <= 100


async def test_the_multipart_session_is_applied_before_the_first_turn(
        gateway: GatewayProcess) -> None:
    peer = await PeerClient.call(gateway.http, session={
        "type": "realtime", "model": "gpt-realtime", "instructions": "words=3"})
    try:
        assert (await peer.recv())["type"] == "session.created"
        updated = await peer.until("session.updated")
        assert updated["session"]["instructions"] == "words=3"
        peer.speak(spoken(1.2))
        done = await peer.until("response.done")
        transcript = done["response"]["output"][0]["content"][0]["transcript"]
        assert len(transcript.split()) == 4 + 3  # "answer to turn 1:" then 3 words
        async with httpx.AsyncClient(timeout=30.0) as http:  # OpenAI's name for the hang-up
            assert (await http.post(peer.call_url + "/hangup")).status_code == 204
    finally:
        await peer.close()


async def test_hang_up_ends_the_session(gateway: GatewayProcess) -> None:
    peer = await PeerClient.call(gateway.http)
    created = await peer.recv()
    sid = created["session"]["id"]
    r = valkey_of(gateway.data_dir)
    assert (await meta(r, sid))["state"] == "open"
    assert await peer.hang_up() == 204
    assert (await meta(r, sid))["state"] != "open"
    assert await gateway.metric("duplex_webrtc_calls_active") == 0
    assert await peer.hang_up() == 404  # it is gone
    await r.aclose()


async def test_a_dropped_peer_detaches_and_resumes_over_the_websocket(
        gateway: GatewayProcess) -> None:
    peer = await PeerClient.call(gateway.http)
    created = await peer.recv()
    sid, token = created["session"]["id"], created["resume_token"]
    peer.speak(spoken(1.0))
    await peer.until("response.done")
    cursor = max(e["server_event_seq"] for e in peer.events)
    await peer.close()  # no hang-up: the peer connection just goes
    r = valkey_of(gateway.data_dir)
    await detached(r, sid, timeout=30)

    async def no_calls() -> bool:
        return await gateway.metric("duplex_webrtc_calls_active") == 0

    await eventually(no_calls, 30, "the dropped call's peer connection is closed")
    ws: RealtimeClient = await resume(gateway.ws, sid, token, cursor)
    try:
        resumed = await ws.until("session.resumed")
        assert resumed["session"]["id"] == sid
        await still_works(ws)
    finally:
        await ws.close()
        await r.aclose()
