"""A one-stage model through the real gateway: the plugin's plan sends every
input to its one stage, and turns, barge-in with truncation and resume after a
drop work as they do for the three-stage cascade, with no change to
``gateway/`` or ``orchestrator/``."""

from __future__ import annotations

from typing import Any

import numpy as np
from client import RealtimeClient, last_seq, reply_pcm, resume, silence, tone
from gateway_process import GatewayProcess

RATE = 24000


def noise(seconds: float, seed: int) -> np.ndarray:
    """Audio that is not its own reverse, loud enough to count as speech."""
    rng = np.random.default_rng(seed)
    return rng.integers(-12000, 12000, int(RATE * seconds)).astype(np.int16)


async def opened(gateway: GatewayProcess, **session: Any) -> tuple[RealtimeClient, dict]:
    c = await RealtimeClient.connect(gateway.ws)
    created = await c.until("session.created")
    if session:
        await c.send("session.update", session=session)
        await c.until("session.updated")
    return c, created


async def test_a_push_to_talk_turn_is_answered_with_its_audio_backwards(
        gateway: GatewayProcess) -> None:
    c, _ = await opened(gateway, turn_detection=None)
    try:
        spoken = noise(0.75, seed=1)
        await c.append(spoken, frame_ms=50)
        await c.send("input_audio_buffer.commit")
        await c.send("response.create")
        done = await c.until("response.done")
        assert done["response"]["status"] == "completed"
        assert np.array_equal(reply_pcm(c.events, done["response"]["id"]), spoken[::-1])
        heard = c.of("conversation.item.input_audio_transcription.completed")
        assert heard[0]["transcript"] == "750 ms backwards"
        words = done["response"]["output"][0]["content"][0]["transcript"].split()
        assert words == [f"c{n}" for n in range(1, 9)]  # 8 chunks of at most 100 ms
        assert done["timings_ms"]["echo_first_output"] >= 0
    finally:
        await c.close()


async def test_a_vad_turn_then_a_barge_in_truncates_history_to_what_was_heard(
        gateway: GatewayProcess) -> None:
    c, _ = await opened(gateway)
    try:
        await c.append(tone(3.0), frame_ms=100)
        await c.append(silence(0.8), frame_ms=100)
        first = await c.until("response.output_audio.delta")
        rid, item_id = first["response_id"], first["item_id"]
        await c.append(tone(0.6, freq=880), frame_ms=100)  # the user cuts in
        done = await c.until("response.done")
        assert done["response"]["id"] == rid
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        await c.send("conversation.item.truncate", item_id=item_id, content_index=0,
                     audio_end_ms=200)
        truncated = await c.until("conversation.item.truncated")
        assert truncated["audio_end_ms"] == 200
        await c.send("conversation.item.retrieve", item_id=item_id)
        item = (await c.until("conversation.item.retrieved"))["item"]
        assert item["content"][0]["transcript"].split() == ["c1", "c2"]
        assert item["status"] == "incomplete"
        nothing_after = [e for e in c.events[c.events.index(done) + 1:]
                         if e.get("response_id") == rid]
        assert nothing_after == []  # I2: no audio of the cancelled reply after its done
    finally:
        await c.close()


async def test_a_dropped_socket_resumes_and_the_reply_completes(
        gateway: GatewayProcess) -> None:
    c, created = await opened(gateway, turn_detection=None)
    spoken = noise(2.0, seed=2)
    await c.append(spoken, frame_ms=100)
    await c.send("input_audio_buffer.commit")
    await c.send("response.create")
    first = await c.until("response.output_audio.delta")
    rid = first["response_id"]
    before = list(c.events)
    c.ws.transport.abort()  # no close frame: the session detaches and goes on
    back = await resume(gateway.ws, created["session"]["id"], created["resume_token"],
                        last_seq(before))
    try:
        resumed = await back.until("session.resumed")
        assert resumed["recovered"] is False
        done = await back.until("response.done", timeout=20)
        assert done["response"]["id"] == rid and done["response"]["status"] == "completed"
        after = [e for e in back.events if "server_event_seq" in e
                 and e["type"] != "session.resumed"]
        seqs = [e["server_event_seq"] for e in [*before, *after] if "server_event_seq" in e]
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost, nothing twice
        assert np.array_equal(reply_pcm([*before, *after], rid), spoken[::-1])
    finally:
        await back.close()
