"""A full voice turn, barge-in, truncation and session isolation over a real socket."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from client import RealtimeClient, silence, tone
from gateway_process import GatewayProcess

from plugins.tone import decode_turn

RESPONSE_ORDER = [
    "response.created", "response.output_item.added", "conversation.item.added",
    "response.content_part.added",
]
CLOSING_ORDER = [
    "response.output_audio.done", "response.output_audio_transcript.done",
    "response.content_part.done", "response.output_item.done", "conversation.item.done",
    "response.done", "rate_limits.updated",
]


def pcm_of(events: list[dict], response_id: str) -> np.ndarray:
    chunks = [np.frombuffer(base64.b64decode(e["delta"]), dtype="<i2") for e in events
              if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)


async def speak(c: RealtimeClient, seconds: float = 1.0) -> None:
    await c.append(tone(seconds))
    await c.append(silence(0.8))


async def test_full_voice_turn_in_protocol_order(client: RealtimeClient) -> None:
    await speak(client, 1.2)
    done = await client.until("response.done")
    await client.until("rate_limits.updated")
    types = client.types()
    # input side, then the response's opening and closing sequences in order
    input_order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                   "input_audio_buffer.committed", "conversation.item.added"]
    assert [t for t in types if t in input_order][:4] == input_order
    created_at = types.index("response.created")
    assert types[created_at:created_at + 4] == RESPONSE_ORDER
    assert types[-7:] == CLOSING_ORDER
    assert done["response"]["status"] == "completed"
    # the user's transcript arrived, and the words match the reply length rule
    transcript = client.of("conversation.item.input_audio_transcription.completed")[0]
    assert "tone turn" in transcript["transcript"]
    # every server event is seq'd 1, 2, 3, … with no gap
    seqs = [e["server_event_seq"] for e in client.events]
    assert seqs == list(range(1, 1 + len(seqs)))
    # the audio heard answers this response's turn, and the transcript matches it
    rid = done["response"]["id"]
    audio = pcm_of(client.events, rid)
    assert len(audio) > 24000 // 2
    turn = decode_turn(audio[:4800], 24000)
    assert turn == 1
    words = "".join(e["delta"] for e in client.of("response.output_audio_transcript.delta"))
    final = client.of("response.output_audio_transcript.done")[0]["transcript"]
    assert final == words and words.startswith("answer to turn 1")
    assert done["response"]["output"][0]["content"][0]["transcript"] == words


async def test_session_update_between_turns_applies_to_the_next_reply(
        client: RealtimeClient) -> None:
    """Both replies complete, so one epoch (one thinker request) serves both turns:
    the new instructions must still reach it."""
    lengths = []
    for words in (7, 3):
        await client.send("session.update", session={"instructions": f"words={words}"})
        await client.until("session.updated")
        await speak(client)
        done = await client.until("response.done")
        assert done["response"]["status"] == "completed"
        lengths.append(len(done["response"]["output"][0]["content"][0]["transcript"].split()))
    assert lengths == [4 + 7, 4 + 3]  # "answer to turn N:" then the words


async def test_i2_server_vad_barge_in_cancels_and_no_old_audio_follows(
        client: RealtimeClient) -> None:
    await client.send("session.update", session={"instructions": "words=60"})
    await speak(client, 1.0)
    first = await client.until("response.output_audio.delta")
    old = first["response_id"]
    await client.append(tone(0.6, freq=660))  # the user talks over the reply
    cancelled = await client.until("response.done")
    assert cancelled["response"]["id"] == old
    assert cancelled["response"]["status"] == "cancelled"
    assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
    types = client.types()
    assert types.index("input_audio_buffer.speech_started") < len(types) - 1
    await client.append(silence(0.8))
    nxt = await client.until("response.done", timeout=30)
    assert nxt["response"]["status"] == "completed" or nxt["response"]["id"] != old
    after = client.events[client.events.index(cancelled) + 1:]
    assert not [e for e in after if e.get("response_id") == old]
    # the reply that was cut short keeps only what was sent of it (I6)
    heard = cancelled["response"]["output"][0]["content"][0]["transcript"]
    full_words = 60
    assert 0 < len(heard.split()) < full_words
    new_audio = pcm_of(client.events, nxt["response"]["id"])
    assert decode_turn(new_audio[:4800], 24000) == 2


async def test_i6_truncate_shortens_history_to_what_was_heard(client: RealtimeClient) -> None:
    await client.send("session.update", session={"instructions": "words=10"})
    await speak(client, 1.0)
    done = await client.until("response.done")
    item_id = done["response"]["output"][0]["id"]
    full = done["response"]["output"][0]["content"][0]["transcript"]
    await client.send("conversation.item.truncate", item_id=item_id, content_index=0,
                      audio_end_ms=700)
    truncated = await client.until("conversation.item.truncated")
    assert truncated["audio_end_ms"] == 700
    await client.send("conversation.item.retrieve", item_id=item_id)
    item = (await client.until("conversation.item.retrieved"))["item"]
    heard = item["content"][0]["transcript"]
    # 200 ms per spoken word: 700 ms is three whole words and part of a fourth
    assert heard == " ".join(full.split()[:3]) + " "
    await client.send("conversation.item.truncate", item_id=item_id, content_index=0,
                      audio_end_ms=10**6)
    error = await client.until("error")
    assert error["error"]["code"] == "invalid_value"


async def test_two_sessions_never_see_each_others_events(gateway: GatewayProcess) -> None:
    async def one() -> tuple[str, list[dict]]:
        c = await RealtimeClient.connect(gateway.ws)
        created = await c.recv()
        await speak(c, 1.0)
        await c.until("response.done")
        await c.close()
        return created["session"]["id"], c.events

    (sid_a, events_a), (sid_b, events_b) = await asyncio.gather(one(), one())
    assert sid_a != sid_b
    for sid, events in ((sid_a, events_a), (sid_b, events_b)):
        ids = {e.get("item_id") or e.get("response_id") for e in events} - {None}
        assert ids and all(sid[-12:] in i for i in ids)
        assert [e["server_event_seq"] for e in events] == list(range(1, len(events) + 1))
