"""I9 end to end: push-to-talk turns (commit and ``response.create`` back to back,
no pause) each get a reply built from the turn just committed.

This is how the npm ``openai`` client, pipecat's manual mode and LiveKit's
manual turns talk. The tone plugin's reply length follows the user's speech
(one word per 200 ms), so a reply built without its turn has the previous
turn's length; consecutive turns here always differ in length.
"""

from __future__ import annotations

import asyncio
import random

from client import RealtimeClient, tone
from gateway_process import GatewayProcess

from plugins.tone.reply import word_count

SESSIONS = 5
TURNS = 20  # per session: 100 in all


def lengths(rng: random.Random, n: int) -> list[int]:
    """Turn lengths in ms (multiples of 200, 3–7 reply words), no two in a row alike."""
    out: list[int] = []
    while len(out) < n:
        ms = rng.randrange(600, 1600, 200)
        if not out or word_count(ms, "") != word_count(out[-1], ""):
            out.append(ms)
    return out


async def talk(url: str, seed: int) -> list[tuple[int, int, int]]:
    """One session's turns; returns (turn, reply words expected, reply words got)."""
    rng = random.Random(seed)
    c = await RealtimeClient.connect(url)
    try:
        await c.until("session.created")
        await c.send("session.update", session={"turn_detection": None})
        await c.until("session.updated")
        results = []
        for turn, ms in enumerate(lengths(rng, TURNS), 1):
            await c.append(tone(ms / 1000), frame_ms=100)
            await c.send("input_audio_buffer.commit")
            await c.send("response.create")
            done = await c.until("response.done", timeout=30)
            assert done["response"]["status"] == "completed", done
            words = done["response"]["output"][0]["content"][0]["transcript"].split()
            assert words[:4] == ["answer", "to", "turn", f"{turn}:"], words
            results.append((turn, word_count(ms, ""), len(words) - 4))
        return results
    finally:
        await c.close()


async def test_i9_every_push_to_talk_reply_answers_its_own_turn(gateway: GatewayProcess) -> None:
    per_session = await asyncio.gather(*(talk(gateway.ws, seed) for seed in range(SESSIONS)))
    wrong = [(s, turn, want, got) for s, results in enumerate(per_session)
             for turn, want, got in results if want != got]
    assert sum(len(r) for r in per_session) == SESSIONS * TURNS
    assert not wrong, f"replies built without their turn (session, turn, want, got): {wrong}"


async def test_a_manual_commit_in_server_vad_mode_does_not_respond(
        client: RealtimeClient) -> None:
    """OpenAI: with server VAD a client's commit only commits; its reply comes
    with ``response.create``."""
    await client.send("session.update", session={"turn_detection": {
        "type": "server_vad", "silence_duration_ms": 10_000}})
    await client.until("session.updated")
    await client.append(tone(0.8), frame_ms=100)
    await client.send("input_audio_buffer.commit")
    await client.until("input_audio_buffer.committed")
    await client.send("session.heartbeat")
    await client.until("session.heartbeat_ack")
    assert "response.created" not in client.types()
    await client.send("response.create")
    done = await client.until("response.done")
    words = done["response"]["output"][0]["content"][0]["transcript"].split()
    assert len(words) - 4 == word_count(800, "")
