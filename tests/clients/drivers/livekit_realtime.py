"""LiveKit's OpenAI ``RealtimeModel`` with its defaults, its ``RealtimeSession`` driven
standalone (no room, no ``AgentSession``) over wss://.

    python livekit_realtime.py

What an ``AgentSession`` does with the session, done by hand: instructions, a reply the
agent starts (``generate_reply``), a spoken turn (``push_audio``), and a barge-in: the
user talks over a reply, the app ``interrupt``s it and ``truncate``s it where the user
stopped hearing it. Audio and text come from the session's ``generation_created``
streams, the user's words from ``input_audio_transcription_completed``.

Then a tool, as an ``AgentSession`` runs one: ``update_tools`` with a ``function_tool``,
a reply that calls it (its generation's ``function_stream``), the call executed by the
SDK's own ``execute_function_call``, its ``FunctionCallOutput`` added to the chat context
(``update_chat_ctx``) and a reply asked for. Last, what LiveKit does on a reconnect: the
chat context, up to the call's output, restored into a fresh session and answered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from common import Inbox, Responses, as_sent, frames, gateway, kind, run, silence, tone
from livekit import rtc
from livekit.agents import llm
from livekit.plugins.openai.realtime import RealtimeModel

RATE = 24000
INSTRUCTIONS = "You are a helpful assistant. words=4"
WEATHER = "seventeen degrees and cloudy"
CALLS: list[dict[str, Any]] = []  # what the tool function itself was called with


@llm.function_tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append({"city": city})
    return WEATHER


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


def watch(session: Any, inbox: Inbox, gens: Generations, errors: list[Any]) -> None:
    session.on("openai_server_event_received", inbox.push)
    session.on("generation_created", gens.on_created)
    session.on("error", lambda ev: errors.append(
        {"recoverable": ev.recoverable, "error": str(ev.error)}))


def described(chat_ctx: llm.ChatContext) -> list[dict[str, Any]]:
    """A chat context's items: each one's type and what it holds."""
    out: list[dict[str, Any]] = []
    for item in chat_ctx.items:
        if item.type == "message":
            out.append({"type": "message", "role": item.role, "text": item.text_content})
        elif item.type == "function_call":
            out.append({"type": "function_call", "name": item.name,
                        "call_id": item.call_id, "arguments": item.arguments})
        elif item.type == "function_call_output":
            out.append({"type": "function_call_output", "call_id": item.call_id,
                        "output": item.output})
    return out


async def tool_call(session: Any, gens: Generations, inbox: Inbox,
                    report: dict[str, Any]) -> llm.ChatContext:
    """The call and the reply to its output; the chat context as it stood before that
    reply (what a reconnect restores)."""
    start = len(inbox.events)
    await session.update_tools([get_weather])
    updated = await inbox.until(lambda e: kind(e) == "session.updated"
                                and e["session"].get("tools"))
    report["tools"] = updated["session"]["tools"]
    session.generate_reply(instructions="call=get_weather")
    event, reading = await asyncio.wait_for(gens.created.get(), 20)
    calls = [call async for call in event.function_stream]
    await asyncio.wait_for(reading, 20)
    outputs = []
    for call in calls:  # what an AgentSession does with each call
        result = await llm.execute_function_call(
            llm.FunctionToolCall(name=call.name, arguments=call.arguments,
                                 call_id=call.call_id), session.tools)
        outputs.append(result.fnc_call_out)
    report["tool_call"] = {
        "user_initiated": event.user_initiated, "ran": list(CALLS),
        "calls": [{"id": c.id, "call_id": c.call_id, "name": c.name,
                   "arguments": c.arguments} for c in calls],
        "outputs": [{"call_id": o.call_id, "output": o.output, "is_error": o.is_error}
                    for o in outputs]}
    chat_ctx = session.chat_ctx.copy()
    chat_ctx.items.extend(outputs)
    await session.update_chat_ctx(chat_ctx)
    restore = session.chat_ctx.copy()
    session.generate_reply()
    report["tool_reply"] = await gens.whole()
    report["tool_chat_ctx"] = described(session.chat_ctx)
    report["tool_errors"] = [e["error"] for e in inbox.events[start:] if kind(e) == "error"]
    return restore


async def reconnect(model: RealtimeModel, chat_ctx: llm.ChatContext,
                    report: dict[str, Any]) -> None:
    """A fresh session given the tools and the old chat context, then asked to reply."""
    session = model.session()
    inbox, gens, errors = Inbox(), Generations(), []
    watch(session, inbox, gens, errors)
    try:
        await session.update_tools([get_weather])
        report["restore"] = described(chat_ctx)
        await session.update_chat_ctx(chat_ctx)
        report["restored_chat_ctx"] = described(session.chat_ctx)
        session.generate_reply()
        report["restored_reply"] = await gens.whole()
        report["restored_errors"] = errors + [
            e["error"] for e in inbox.events if kind(e) == "error"]
    finally:
        await session.aclose()


async def drive(report: dict[str, Any]) -> None:
    base, key = gateway()
    model = RealtimeModel(base_url=base, api_key=key)  # its defaults, our URL
    session = model.session()
    inbox, gens = Inbox(), Generations()
    report["errors"], report["user_transcripts"] = [], []
    watch(session, inbox, gens, report["errors"])
    session.on("input_audio_transcription_completed",
               lambda ev: report["user_transcripts"].append(ev.transcript))
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
        restore = await tool_call(session, gens, inbox, report)
        await reconnect(model, restore, report)
        report["server_events"] = [as_sent(e) for e in inbox.events]  # the raw dicts
    finally:
        await session.aclose()
        await model.aclose()


run(drive)
