"""LiveKit's OpenAI ``RealtimeModel`` with its defaults, its ``RealtimeSession`` driven
standalone (no room, no ``AgentSession``) over wss://.

    python livekit_realtime.py

What an ``AgentSession`` does with the session, done by hand: instructions, a reply the
agent starts (``generate_reply``), a spoken turn (``push_audio``), and a barge-in: the
user talks over a reply, the app ``interrupt``s it and ``truncate``s it where the user
stopped hearing it. Audio and text come from the session's ``generation_created``
streams, the user's words from ``input_audio_transcription_completed``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from common import Inbox, Responses, as_sent, frames, gateway, kind, run, silence, tone
from livekit import rtc
from livekit.plugins.openai.realtime import RealtimeModel

RATE = 24000
INSTRUCTIONS = "You are a helpful assistant. words=4"


def push(session: Any, pcm: bytes) -> None:
    for chunk in frames(pcm):
        session.push_audio(rtc.AudioFrame(data=chunk, sample_rate=RATE, num_channels=1,
                                          samples_per_channel=len(chunk) // 2))


class Generations:
    """Each generation's message streams, read as an agent's audio output reads them."""

    def __init__(self) -> None:
        self.responses = Responses()
        self.created: asyncio.Queue[tuple[Any, asyncio.Task[None]]] = asyncio.Queue()
        self.messages: asyncio.Queue[str] = asyncio.Queue()
        self.first_audio: dict[str, asyncio.Event] = {}

    def on_created(self, event: Any) -> None:
        self.created.put_nowait((event, asyncio.create_task(self._read(event))))

    async def _read(self, event: Any) -> None:
        async for message in event.message_stream:
            self.first_audio[message.message_id] = asyncio.Event()
            self.messages.put_nowait(message.message_id)
            await asyncio.gather(self._audio(message), self._text(message))

    async def _audio(self, message: Any) -> None:
        async for frame in message.audio_stream:
            self.responses.audio(message.message_id, bytes(frame.data))
            self.first_audio[message.message_id].set()

    async def _text(self, message: Any) -> None:
        async for delta in message.text_stream:
            self.responses.text(message.message_id, str(delta))

    async def next(self) -> tuple[Any, asyncio.Task[None], str]:
        """The next generation, its reading task and its (one) message's id."""
        event, reading = await asyncio.wait_for(self.created.get(), 20)
        return event, reading, await asyncio.wait_for(self.messages.get(), 20)

    async def whole(self) -> dict[str, Any]:
        """The next generation, once all of it has arrived and played."""
        event, reading, mid = await self.next()
        await asyncio.wait_for(reading, 20)
        await self.responses.played(mid)
        return {**self.responses.report(mid), "user_initiated": event.user_initiated}


async def barge_in(session: Any, gens: Generations, inbox: Inbox,
                   report: dict[str, Any]) -> None:
    push(session, tone(0.6) + silence(1.5))
    _event, reading, mid = await gens.next()
    await asyncio.wait_for(gens.first_audio[mid].wait(), 20)
    await gens.responses.played(mid, 600)
    push(session, tone(0.6) + silence(1.5))  # the user talks over it
    await inbox.until("input_audio_buffer.speech_started")
    session.interrupt()  # what an AgentSession does when the user speaks
    session.truncate(message_id=mid, modalities=["audio"], audio_end_ms=600)
    truncated = await inbox.until("conversation.item.truncated")
    await asyncio.wait_for(reading, 20)
    report["barge_in"] = {**gens.responses.report(mid),
                          "truncated": {"item_id": truncated["item_id"],
                                        "audio_end_ms": truncated["audio_end_ms"]}}
    report["after_barge_in"] = await gens.whole()


async def drive(report: dict[str, Any]) -> None:
    base, key = gateway()
    model = RealtimeModel(base_url=base, api_key=key)  # its defaults, our URL
    session = model.session()
    inbox, gens = Inbox(), Generations()
    report["errors"], report["user_transcripts"] = [], []
    session.on("openai_server_event_received", inbox.push)
    session.on("generation_created", gens.on_created)
    session.on("input_audio_transcription_completed",
               lambda ev: report["user_transcripts"].append(ev.transcript))
    session.on("error", lambda ev: report["errors"].append(
        {"recoverable": ev.recoverable, "error": str(ev.error)}))
    try:
        await session.update_instructions(INSTRUCTIONS)
        updated = await inbox.until(lambda e: kind(e) == "session.updated"
                                    and e["session"].get("instructions") == INSTRUCTIONS)
        report["session"] = {"instructions": updated["session"]["instructions"],
                             "turn_detection": updated["session"]["audio"]["input"][
                                 "turn_detection"]}
        session.generate_reply()
        report["greeting"] = await gens.whole()
        push(session, tone(1.0) + silence(1.5))
        report["spoken"] = await gens.whole()
        await barge_in(session, gens, inbox, report)
        report["history"] = [{"id": i.id, "role": i.role, "text": i.text_content}
                             for i in session.chat_ctx.items if i.type == "message"]
        report["server_events"] = [as_sent(e) for e in inbox.events]  # the raw dicts
    finally:
        await session.aclose()
        await model.aclose()


run(drive)
