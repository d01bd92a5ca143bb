"""pipecat's ``OpenAIRealtimeLLMService`` in a minimal pipeline, over wss://.

    python pipecat_realtime.py vad|manual|tools

The pipeline is ``[tap ↑, service, tap ↓]``: what the service pushes downstream (the
reply's audio and text) and upstream (the user's transcript, errors) is what a pipecat
app builds on. The context starts the conversation (the bot speaks first), the user
speaks a turn, then talks over the next reply: with server VAD the service truncates on
``speech_started``; in manual mode the app's ``InterruptionFrame`` cancels and truncates.
``retrieve_conversation_item`` then shows what the conversation kept.

``tools``: the context offers a function (``ToolsSchema``) whose handler is registered
with ``llm.register_function``, and the instruction ``call=get_weather`` makes the
first reply call it; the pipeline ends in the context's assistant aggregator, which
records the result and asks the service for the reply that uses it, as in an app.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from common import Inbox, Responses, frames, gateway, recording, run, silence, tone
from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    ErrorFrame,
    Frame,
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

MODE = sys.argv[1]
RATE = 24000
WEATHER = "seventeen degrees and cloudy"


class Tap(FrameProcessor):
    """Passes every frame on; keeps those travelling ``direction`` in the inbox."""

    def __init__(self, direction: FrameDirection, inbox: Inbox) -> None:
        super().__init__()
        self.direction, self.inbox = direction, inbox

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == self.direction:
            self.inbox.push(frame)
        await self.push_frame(frame, direction)


class Replies:
    """The replies as the frames downstream tell them, one per TTSStarted…ResponseEnd."""

    def __init__(self, worker: PipelineWorker, inbox: Inbox) -> None:
        self.worker, self.inbox, self.responses, self.count = worker, inbox, Responses(), 0

    def started(self) -> str:
        self.count += 1
        return f"reply-{self.count}"

    async def next(self) -> dict[str, Any]:
        """The next whole reply (its audio and text) once it has been played out."""
        await self.inbox.until(lambda f: isinstance(f, TTSStartedFrame), "TTSStartedFrame")
        rid = self.started()
        while True:
            frame = await self.inbox.until(lambda f: isinstance(
                f, TTSAudioRawFrame | TTSTextFrame | LLMFullResponseEndFrame))
            if isinstance(frame, TTSAudioRawFrame):
                self.responses.audio(rid, frame.audio)
            elif isinstance(frame, TTSTextFrame):
                self.responses.text(rid, frame.text)
            else:
                await self.responses.played(rid)
                # what the output transport says once the audio has played out
                await self.worker.queue_frame(BotStoppedSpeakingFrame())
                return self.responses.report(rid)


def service() -> OpenAIRealtimeLLMService:
    base, key = gateway()
    audio = events.AudioConfiguration(input=events.AudioInput(
        turn_detection=False if MODE == "manual" else None))  # None: the server's VAD
    settings = OpenAIRealtimeLLMService.Settings(
        system_instruction="call=get_weather" if MODE == "tools" else "words=3",
        session_properties=events.SessionProperties(audio=audio))
    return OpenAIRealtimeLLMService(api_key=key, settings=settings,
                                    base_url=base.replace("https:", "wss:", 1) + "/realtime")


async def say(worker: PipelineWorker, seconds: float) -> None:
    """A microphone's frames; in manual mode the app's own VAD frames around them."""
    if MODE == "manual":
        await worker.queue_frame(UserStartedSpeakingFrame())
    for chunk in frames(tone(seconds) + silence(0.8)):
        await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=RATE,
                                                    num_channels=1))
    if MODE == "manual":
        await worker.queue_frame(UserStoppedSpeakingFrame())


async def interrupt(worker: PipelineWorker, llm: OpenAIRealtimeLLMService, down: Inbox,
                    items: list[Any], report: dict[str, Any]) -> None:
    """Talk over a reply once 600 ms of it has played, then read back what was kept."""
    await say(worker, 0.6)
    await down.until(lambda f: isinstance(f, TTSStartedFrame), "the reply's audio")
    replies = Replies(worker, down)
    rid = replies.started()
    while replies.responses.of(rid)["bytes"] < 28800:
        frame = await down.until(lambda f: isinstance(f, TTSAudioRawFrame))
        replies.responses.audio(rid, frame.audio)
    await replies.responses.played(rid, 600)
    cut = next(i for i in reversed(items) if i.role == "assistant")
    if MODE == "manual":
        await worker.queue_frame(InterruptionFrame())  # what the app's VAD would push
    await say(worker, 0.6)
    await down.until(lambda f: isinstance(f, LLMFullResponseEndFrame), "the cut reply's end")
    after = await replies.next()  # the interrupting speech's reply
    kept = await llm.retrieve_conversation_item(cut.id)
    report["barge_in"] = {**replies.responses.report(rid), "item_id": cut.id,
                          "kept": {"status": kept.status,
                                   "transcript": kept.content[0].transcript}}
    report["after_barge_in"] = after


def weather_context() -> LLMContext:
    return LLMContext(tools=ToolsSchema(standard_tools=[FunctionSchema(
        name="get_weather", description="The weather in a city.",
        properties={"city": {"type": "string"}}, required=["city"])]))


async def tool_turn(worker: PipelineWorker, context: LLMContext, calls: list[Any],
                    down: Inbox, items: list[Any], report: dict[str, Any]) -> None:
    """The context's first reply calls the tool; the handler's result is answered."""
    replies = Replies(worker, down)
    await worker.queue_frame(LLMContextFrame(context))
    started = await down.until(lambda f: isinstance(f, FunctionCallInProgressFrame))
    result = await down.until(lambda f: isinstance(f, FunctionCallResultFrame))
    reply = await replies.next()
    report["tool"] = {
        "handler": calls,
        "in_progress": {"name": started.function_name, "id": started.tool_call_id,
                        "arguments": started.arguments},
        "result": {"id": result.tool_call_id, "result": result.result},
        "sent": [{"call_id": i.call_id, "output": i.output} for i in items
                 if i.type == "function_call_output"],
        "reply": reply,
        # what the aggregator recorded before asking for the reply
        "context": [{k: m.get(k) for k in ("role", "content", "tool_call_id", "tool_calls")}
                    for m in context.get_messages()
                    if isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool")]}


async def drive(report: dict[str, Any]) -> None:
    up, down, items, calls = Inbox(), Inbox(), [], []
    # the service parses each message with events.parse_server_event
    report["server_events"] = recording(events, "parse_server_event")
    llm = service()
    context = weather_context()

    @llm.event_handler("on_conversation_item_created")
    async def _added(_service: Any, _item_id: str, item: Any) -> None:
        items.append(item)

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append({"arguments": dict(params.arguments), "id": params.tool_call_id})
        await params.result_callback(WEATHER)

    llm.register_function("get_weather", get_weather)
    # the app's context aggregators: the assistant's records the call and its result
    # and asks the service for the reply
    pair = LLMContextAggregatorPair(context)
    user, assistant = ([pair.user()], [pair.assistant()]) if MODE == "tools" else ([], [])
    worker = PipelineWorker(Pipeline([Tap(FrameDirection.UPSTREAM, up), *user, llm,
                                      Tap(FrameDirection.DOWNSTREAM, down), *assistant]),
                            cancel_on_idle_timeout=False, enable_rtvi=False,
                            params=PipelineParams(audio_in_sample_rate=RATE,
                                                  audio_out_sample_rate=RATE))
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_worker: Any, _frame: Any) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), 20)
        if MODE == "tools":
            await tool_turn(worker, context, calls, down, items, report)
            report["errors"] = [f.error for f in up.events if isinstance(f, ErrorFrame)]
            return
        replies = Replies(worker, down)
        await worker.queue_frame(LLMContextFrame(LLMContext()))  # the bot speaks first
        report["greeting"] = await replies.next()
        await say(worker, 1.0)
        user = await up.until(lambda f: isinstance(f, TranscriptionFrame), "the transcript")
        report["turn"] = {**await replies.next(), "user_transcript": user.text}
        await interrupt(worker, llm, down, items, report)
        try:
            await llm.retrieve_conversation_item("item_none")
        except Exception as exc:  # pipecat's way of saying "not there"; the session goes on
            report["missing_item"] = str(exc)
        report["errors"] = [f.error for f in up.events if isinstance(f, ErrorFrame)]
        report["history"] = [{"id": i.id, "role": i.role, "type": i.type} for i in items]
    finally:
        await worker.cancel()
        await running


run(drive)
