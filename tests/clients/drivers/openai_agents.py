"""The ``openai-agents`` Python SDK's realtime agent: a ``RealtimeAgent`` with a
``@function_tool``, run by a ``RealtimeRunner`` whose model config gives only the
gateway's ``url`` and key (the SDK's own ``OpenAIRealtimeWebSocketModel`` and defaults).

    python openai_agents.py

The agent's instructions say ``call=get_weather``, so the tone plugin's reply to the
user's one spoken turn calls the tool; the SDK runs the real function, sends its
output back and asks for a reply, which says it. Reported: what the function was
called with, the session's ``tool_start``/``tool_end`` events, the reply's audio and
the SDK's history.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from common import Inbox, Responses, frames, gateway, kind, run, silence, tone

WEATHER = "seventeen degrees and cloudy"
CALLS: list[dict[str, Any]] = []  # what the tool function itself was called with


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append({"city": city})
    return WEATHER


async def pump(session: Any, inbox: Inbox, responses: Responses) -> None:
    async for event in session:
        if event.type == "audio":
            responses.audio(event.item_id, event.audio.data)
        elif event.type == "raw_model_event" and event.data.type == "transcript_delta":
            responses.text(event.data.item_id, event.data.delta)
        inbox.push(event)


def history(items: list[Any]) -> list[dict[str, Any]]:
    """The SDK's history as its user reads it: each item's kind and what it says."""
    out: list[dict[str, Any]] = []
    for item in items:
        entry: dict[str, Any] = {"type": item.type, "id": item.item_id}
        if item.type == "function_call":
            entry.update(name=item.name, arguments=item.arguments, output=item.output,
                         status=item.status)
        else:
            entry.update(role=item.role, status=getattr(item, "status", None),
                         text=" ".join(str(getattr(c, "transcript", None)
                                           or getattr(c, "text", None) or "")
                                       for c in item.content))
        out.append(entry)
    return out


async def drive(report: dict[str, Any]) -> None:
    base, key = gateway()
    url = base.replace("https:", "wss:", 1) + "/realtime?model=gpt-realtime"
    agent = RealtimeAgent(name="weather", tools=[get_weather],
                          instructions="You are a helpful assistant. call=get_weather")
    runner = RealtimeRunner(agent)
    session = await runner.run(model_config={"url": url, "api_key": key})
    inbox, responses = Inbox(), Responses()
    async with session:
        reader = asyncio.create_task(pump(session, inbox, responses))
        for chunk in frames(tone(1.0) + silence(1.5)):  # the user's one turn
            await session.send_audio(chunk)
        start = await inbox.until("tool_start")
        end = await inbox.until("tool_end")
        report["tool_start"] = {"tool": start.tool.name, "arguments": start.arguments}
        report["tool_end"] = {"tool": end.tool.name, "arguments": end.arguments,
                              "output": end.output}
        report["calls"] = list(CALLS)
        first = await inbox.until("audio")  # the reply to the tool's output
        reply = await inbox.until(lambda e: kind(e) == "history_updated" and any(
            i.item_id == first.item_id and i.status == "completed" and i.content
            and i.content[0].transcript for i in e.history))
        report["reply"] = responses.report(first.item_id)
        report["history"] = history(reply.history)
        report["errors"] = [str(e.error) for e in inbox.events if kind(e) == "error"]
        reader.cancel()


run(drive)
