"""``ChatServerEngine``: a ``StageEngine`` whose model runs on an
OpenAI-compatible server apart from the gateway (``--llm-url``: vLLM,
llama.cpp's ``llama-server``, or any ``/v1/chat/completions`` that streams).

Each stage request is one conversation. The plugin's ``ChatAdapter`` plans
each payload into a ``ChatChunk`` of messages; the engine keeps the
conversation (every chunk's messages, and every reply as an assistant
message) and sends it whole with each generating chunk, as one streamed chat
completion. The conversation only ever grows at its end, and the same
message objects are serialised the same way each time, so every request
starts with the bytes of the one before: the server's prefix cache (vLLM's
automatic prefix caching, llama.cpp's slot cache) prefills only the new turn.
Each completion's ``usage`` (``prompt_tokens_details.cached_tokens``, or
llama.cpp's ``timings.cache_n``) is kept in ``prefills`` and counted in
``counts``, which the gateway's metrics read.

Everything runs on the caller's loop: a request is a task that takes its
chunks in order. Aborting the request cancels the task, which closes the
stream's connection at once (``engines.model_http``); the server sees the
disconnect and stops generating. A server that is down, silent for
``timeout_s`` or refusing fails the request with one line that says which
(the gateway makes it the session's ``error``; the next turn starts a new
request). ``ServerGate`` bounds the streams open on the server, and a
request holding ``max_pending_inputs`` unplanned inputs raises
``Backpressure``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.base import Backpressure, Prefill, StageOutput, UnknownRequest, Usage
from engines.llamacpp_server import parse_usage
from engines.model_http import (
    Endpoint,
    ModelServerError,
    ServerBroken,
    ServerGate,
    ServerRefused,
    request,
    server_events,
)
from engines.stages import ChatAdapter, ChatChunk, ChatReply, ChatToolCall, ModelServer, StageResult

log = logging.getLogger(__name__)

MAX_PENDING_INPUTS = 256
PREFILLS_KEPT = 256


@dataclass(slots=True, eq=False)
class _Conversation:
    request_id: str
    tag: Any
    state: Any = None
    messages: list[Mapping[str, Any]] = field(default_factory=list)
    chunks: asyncio.Queue[ChatChunk] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _Stream:
    """A reply as it streams: its words, its calls by index, its end."""

    words: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)  # [id, name, arguments]
    finish: str | None = None
    usage: Usage | None = None
    done: bool = False

    def reply(self) -> ChatReply:
        calls = tuple(ChatToolCall(c[0] or f"call_{i}", c[1], c[2])
                      for i, c in sorted(self.calls.items()))
        return ChatReply("".join(self.words), calls, self.finish)


class ChatServerEngine:
    """A ``StageEngine`` on an OpenAI-compatible chat server (module docstring)."""

    def __init__(self, stage: int, name: str, adapter: ChatAdapter, server: ModelServer, *,
                 sampling: Mapping[str, Any] | None = None,
                 max_pending_inputs: int = MAX_PENDING_INPUTS) -> None:
        self.stage = stage
        self.name = name
        self._adapter = adapter
        self.server = server
        self.endpoint = Endpoint.parse(server.url)
        self.gate = ServerGate(str(self.endpoint), server.max_streams, server.max_waiting,
                               server.timeout_s)
        self._sampling = dict(sampling or {})
        self._max_pending = max_pending_inputs
        self._model = server.model
        self._requests: dict[str, _Conversation] = {}
        self._outputs: asyncio.Queue[StageOutput] = asyncio.Queue()
        self.prefills: deque[Prefill] = deque(maxlen=PREFILLS_KEPT)
        # completions by outcome (ok, or the failure's class), and their tokens
        # (prompt, cached, completion): gateway.metrics reads these
        self.counts: Counter[str] = Counter()
        self.counts_tokens = True
        self.disconnects = 0  # streams closed before they ended (barge-ins, aborts)

    # -- StageEngine -----------------------------------------------------------------

    async def run(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await self.abort(list(self._requests))

    def readiness(self) -> str:
        return ""  # the server is asked per turn: one that is down fails turns, not readiness

    async def wait_ready(self) -> None:
        """Ready at once (as ``readiness`` says)."""

    def has_request(self, request_id: str) -> bool:
        return request_id in self._requests

    async def outputs(self) -> AsyncIterator[StageOutput]:
        while True:
            yield await self._outputs.get()

    async def submit_initial(self, request_id: str, tag: Any, payload: Any) -> None:
        if request_id in self._requests:
            raise ValueError(f"request {request_id} already exists")
        conv = _Conversation(request_id, tag)
        self._requests[request_id] = conv
        try:
            conv.state = self._adapter.open(tag)
        except Exception as exc:
            self._fail(conv, repr(exc))
            return
        conv.task = asyncio.create_task(self._serve(conv), name=f"chat-{request_id}")
        self._plan(conv, payload)

    async def submit_update(self, request_id: str, payload: Any) -> None:
        conv = self._requests.get(request_id)
        if conv is None:
            raise UnknownRequest(request_id)
        if conv.chunks.qsize() >= self._max_pending:
            raise Backpressure(f"stage {self.name}: {request_id} holds "
                               f"{self._max_pending} inputs")
        self._plan(conv, payload)

    async def abort(self, request_ids: Sequence[str]) -> None:
        tasks = []
        for request_id in request_ids:
            conv = self._requests.pop(request_id, None)
            if conv is not None:
                if conv.task is not None:
                    conv.task.cancel()
                    tasks.append(conv.task)
                self._close(conv)
        if tasks:  # each closes its connection as it unwinds
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- a request ---------------------------------------------------------------------

    def _plan(self, conv: _Conversation, payload: Any) -> None:
        try:
            chunk = self._adapter.plan(conv.state, payload)
        except Exception as exc:
            self._fail(conv, repr(exc))
            return
        if chunk is not None:
            conv.chunks.put_nowait(chunk)

    async def _serve(self, conv: _Conversation) -> None:
        """The request's chunks, one at a time, in order."""
        try:
            while True:
                chunk = await conv.chunks.get()
                for result in chunk.emit:
                    self._deliver(conv, result)
                if chunk.generate:
                    await self._complete(conv, chunk)
                elif not chunk.detached:
                    conv.messages.extend(chunk.messages)
        except ModelServerError as exc:
            self.counts[type(exc).__name__] += 1
            log.warning("stage %s (%s) request %s: %s", self.stage, self.name,
                        conv.request_id, exc)
            self._fail(conv, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the adapter's (e.g. a call that breaks its schema)
            self.counts["failed"] += 1
            log.exception("stage %s (%s) request %s failed", self.stage, self.name,
                          conv.request_id)
            self._fail(conv, f"{type(exc).__name__}: {exc}")

    async def _complete(self, conv: _Conversation, chunk: ChatChunk) -> None:
        messages = [*chunk.messages] if chunk.detached else [*conv.messages, *chunk.messages]
        async with self.gate.slot():
            body = await self._body(messages, chunk)
            stream = await self._stream(conv, chunk, body)
        self.counts["ok"] += 1
        if stream.usage is not None:
            self.prefills.append(Prefill(conv.request_id, stream.usage,
                                         detached=chunk.detached))
            self.counts["prompt_tokens"] += stream.usage.prompt_tokens
            self.counts["cached_tokens"] += stream.usage.cached_tokens
            self.counts["completion_tokens"] += stream.usage.completion_tokens
        results, kept = self._adapter.on_end(conv.state, chunk, stream.reply())
        if not chunk.detached:
            conv.messages.extend(chunk.messages)
            conv.messages.append(assistant_message(kept))
        for result in results:
            self._deliver(conv, result)

    async def _body(self, messages: list[Mapping[str, Any]], chunk: ChatChunk) -> bytes:
        body: dict[str, Any] = {**self._sampling, "model": await self._model_name(),
                                "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True},
                                "max_tokens": max(1, chunk.max_tokens)}
        if chunk.tools:
            body["tools"] = list(chunk.tools)
            if chunk.tool_choice is not None:
                body["tool_choice"] = chunk.tool_choice
        return json.dumps(body, ensure_ascii=False).encode()

    async def _stream(self, conv: _Conversation, chunk: ChatChunk, body: bytes) -> _Stream:
        stream = _Stream()
        async with request(self.endpoint, "POST", "/chat/completions", body=body,
                           headers=self._headers(), timeout_s=self.server.timeout_s) as answer:
            if answer.status != 200:
                raise ServerRefused(f"the model server at {self.endpoint} refused the "
                                    f"completion (HTTP {answer.status}): "
                                    f"{error_message(await answer.text())}", answer.status)
            pending = bytearray()
            try:
                async for data in answer.body():
                    for event in server_events(data, pending):
                        self._take(conv, chunk, stream, event)
                    if stream.done:
                        break
            except asyncio.CancelledError:
                self.disconnects += 1  # leaving the block closes the connection
                raise
        if stream.finish is None:
            raise ServerBroken(f"the model server at {self.endpoint} ended the stream "
                               "before the reply finished")
        return stream

    def _take(self, conv: _Conversation, chunk: ChatChunk, stream: _Stream, event: str) -> None:
        """One server-sent event of the stream."""
        if event == "[DONE]":
            stream.done = True
            return
        try:
            data = json.loads(event)
        except ValueError:
            raise ServerBroken(f"the model server at {self.endpoint} sent "
                               f"{event[:120]!r}, not JSON") from None
        if not isinstance(data, dict):
            raise ServerBroken(f"the model server at {self.endpoint} sent {event[:120]!r}")
        if data.get("error") is not None:
            raise ServerRefused(f"the model server at {self.endpoint} failed the completion: "
                                f"{error_message(event)}", 200)
        usage = parse_usage(data)
        if usage is not None:
            stream.usage = usage
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            words = delta.get("content")
            if words:
                stream.words.append(words)
                for result in self._adapter.on_text(conv.state, chunk, words):
                    self._deliver(conv, result)
            for call in delta.get("tool_calls") or ():
                entry = stream.calls.setdefault(int(call.get("index", 0)), ["", "", ""])
                function = call.get("function") or {}
                entry[0] = call.get("id") or entry[0]
                entry[1] += function.get("name") or ""
                entry[2] += function.get("arguments") or ""
            stream.finish = choice.get("finish_reason") or stream.finish

    async def _model_name(self) -> str:
        """The model to ask for: ``--llm-model``, else the server's first."""
        if self._model is None:
            async with request(self.endpoint, "GET", "/models", headers=self._headers(),
                               timeout_s=self.server.timeout_s) as answer:
                text = await answer.text(1 << 20)
            try:
                self._model = str(json.loads(text)["data"][0]["id"])
            except (ValueError, LookupError, TypeError):
                raise ServerRefused(f"the model server at {self.endpoint} names no model "
                                    f"(HTTP {answer.status}; set --llm-model)",
                                    answer.status) from None
        return self._model

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.server.api_key:
            headers["Authorization"] = f"Bearer {self.server.api_key}"
        return headers

    # -- outputs -----------------------------------------------------------------------

    def _deliver(self, conv: _Conversation, result: StageResult) -> None:
        if self._requests.get(conv.request_id) is conv:
            self._outputs.put_nowait(StageOutput(self.stage, conv.request_id, conv.tag, result))

    def _fail(self, conv: _Conversation, message: str) -> None:
        if self._requests.get(conv.request_id) is not conv:
            return
        del self._requests[conv.request_id]
        self._outputs.put_nowait(StageOutput(self.stage, conv.request_id, conv.tag, None,
                                             message))
        self._close(conv)

    def _close(self, conv: _Conversation) -> None:
        if conv.state is None:
            return
        state, conv.state = conv.state, None
        try:
            self._adapter.close(state)
        except Exception:
            log.exception("stage %s (%s): adapter close failed", self.stage, self.name)


def assistant_message(reply: ChatReply) -> dict[str, Any]:
    """A reply as the conversation keeps it (as OpenAI's API takes it back)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
    return message


def error_message(body: str) -> str:
    """An error answer's message (OpenAI's ``{"error": {"message": ...}}``), or
    its text, cut short."""
    try:
        data = json.loads(body)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        message = body
    return str(message).strip()[:300] or "(no message)"
