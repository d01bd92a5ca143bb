"""The ``openai`` Python package's Realtime client, GA or beta, over wss://.

    python openai_python.py ga|beta

A spoken turn on server VAD ("words=3"), then a reply the user talks over: the gateway
cancels it, the client truncates it where the user stopped hearing it, and the
interrupting speech gets a reply of its own. Everything goes through the SDK's
connection, its typed client-event helpers and its typed server events.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from typing import Any

from common import Inbox, Responses, audio_ms, frames, gateway, kind, recording, run, silence, tone
from openai import AsyncOpenAI

DIALECT = sys.argv[1]
# the events a user of each dialect reads (beta names when the client asks for beta)
AUDIO, TEXT, ADDED = {
    "ga": ("response.output_audio.delta", "response.output_audio_transcript.delta",
           "conversation.item.added"),
    "beta": ("response.audio.delta", "response.audio_transcript.delta",
             "conversation.item.created"),
}[DIALECT]


def session(words: int) -> dict[str, Any]:
    vad = {"type": "server_vad", "silence_duration_ms": 300}
    if DIALECT == "ga":
        return {"type": "realtime", "instructions": f"words={words}",
                "audio": {"input": {"turn_detection": vad}}}
    return {"instructions": f"words={words}", "turn_detection": vad,
            "input_audio_format": "pcm16", "modalities": ["audio", "text"]}


async def speak(conn: Any, seconds: float) -> None:
    for frame in frames(tone(seconds) + silence(0.8)):
        await conn.input_audio_buffer.append(audio=base64.b64encode(frame).decode())


async def pump(conn: Any, inbox: Inbox, responses: Responses) -> None:
    async for event in conn:
        if event.type == AUDIO:
            responses.audio(event.response_id, base64.b64decode(event.delta))
        elif event.type == TEXT:
            responses.text(event.response_id, event.delta)
        inbox.push(event)


async def configure(conn: Any, inbox: Inbox, words: int) -> Any:
    await conn.session.update(session=session(words))
    return (await inbox.until("session.updated")).session


async def barge_in(conn: Any, inbox: Inbox, responses: Responses,
                   report: dict[str, Any]) -> None:
    first = await inbox.until(AUDIO)
    await speak(conn, 0.6)  # the user talks over the reply
    cut = await inbox.until(lambda e: kind(e) == "response.done"
                            and e.response.id == first.response_id)
    after_cut = inbox.mark()  # the next turn may start while the truncate is on its way
    heard = min(audio_ms(responses.of(first.response_id)["bytes"]), 400)
    await conn.conversation.item.truncate(item_id=first.item_id, content_index=0,
                                          audio_end_ms=heard)
    truncated = await inbox.until("conversation.item.truncated")
    details = cut.response.status_details
    report["barge_in"] = {**responses.report(first.response_id), "status": cut.response.status,
                          "reason": details.reason if details else None,
                          "item_id": first.item_id, "sent_ms": heard,
                          "truncated": {"item_id": truncated.item_id,
                                        "audio_end_ms": truncated.audio_end_ms}}
    inbox.rewind(after_cut)
    created = await inbox.until("response.created")
    start = await inbox.until(lambda e: kind(e) == AUDIO
                              and e.response_id == created.response.id)
    report["turn3"] = responses.report(start.response_id)


async def drive(report: dict[str, Any]) -> None:
    base, key = gateway()
    client = AsyncOpenAI(api_key=key, websocket_base_url=base.replace("https:", "wss:", 1))
    realtime = client.realtime if DIALECT == "ga" else client.beta.realtime
    inbox, responses = Inbox(), Responses()
    async with realtime.connect(model="duplex-gateway") as conn:
        report["server_events"] = recording(conn)
        reader = asyncio.create_task(pump(conn, inbox, responses))
        created = await inbox.until("session.created")
        report["session_id"] = created.session.id
        await conn.response.cancel(event_id="evt_idle")  # nothing to cancel: an error
        error = await inbox.until("error")
        report["error"] = {"model": type(error).__name__, "code": error.error.code,
                           "event_id": error.error.event_id}
        updated = await configure(conn, inbox, 3)
        report["session"] = {"instructions": updated.instructions}
        await speak(conn, 1.0)
        user = await inbox.until("conversation.item.input_audio_transcription.completed")
        done = await inbox.until("response.done")
        report["turn1"] = {**responses.report(done.response.id), "status": done.response.status,
                           "user_transcript": user.transcript}
        await configure(conn, inbox, 60)
        await speak(conn, 0.6)
        await barge_in(conn, inbox, responses, report)
        report["models"] = sorted({f"{kind(e)}:{type(e).__name__}" for e in inbox.events})
        report["history"] = [{"type": kind(e), "role": e.item.role}
                             for e in inbox.events if kind(e) == ADDED]
        reader.cancel()


run(drive)
