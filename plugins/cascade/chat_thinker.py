"""The cascade's thinker on a model server apart from the gateway (``--llm-url``).

``ChatThinker`` is the ``ChatAdapter`` (``engines.stages``) that
``engines.chat_server`` runs: it takes the payloads ``ThinkerAdapter`` takes
(``Context``, ``UserTurn``, ``Draft``, ``StartResponse``) and plans them as
OpenAI chat messages instead of ChatML text, so any OpenAI-compatible server
(vLLM, llama.cpp's, a hosted API) renders them with its own chat template:

- the instructions are the first, system, message; later instructions are
  system messages where they come; the history and each turn are messages
  appended, never rewritten (the server's prefix cache keeps the rest);
- the session's tools go with each reply in OpenAI's ``tools``, under its
  ``tool_choice``; a ``StartResponse`` with its own tools sends those; a
  turn the listener is unsure of is answered ``SAY_AGAIN``, as the local
  thinker does, without the model;
- a reply streams to the talker clause by clause (``ClauseSplitter``); its
  calls — parsed by the server (``tool_calls``), or written as text the way
  small models do (``tool_calls.CallParser``, never spoken) — are checked
  against their tools' schemas (``call_check``) and go out as ``ToolCall``s
  after the reply's words, before its last clause. A call that breaks its
  schema, or names a tool the reply may not call, fails the request with a
  line that says so (the session's ``error``; the next turn starts afresh);
  under ``tool_choice: none`` a call is dropped, as the local thinker does;
- a ``function_call_output`` answers the call the conversation made: the
  session names calls itself, so its call ids are matched, in order, to the
  ids the server gave the calls not yet answered.

Drafts are not planned: a guess would cost a shared server a whole
completion, and a dropped one a slot and its tokens, for the time between a
pause and the turn's end (docs/model-servers.md). The listener still drafts
(its words still help the turn detector); the thinker starts at the turn's end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from duplex import effects as fx
from duplex.fence import Fence
from duplex.tools import NO_TOOLS, Tool, ToolSet
from engines.stages import ChatChunk, ChatReply, ChatToolCall, StageResult
from plugins.base import Context, HistoryItem, history_item
from plugins.cascade import tool_calls as tc
from plugins.cascade.call_check import InvalidCall, checked_arguments
from plugins.cascade.clauses import ClauseSplitter
from plugins.cascade.payloads import Clause, Draft, ToolCall, UserTurn
from plugins.cascade.reply_steps import ReplySteps
from plugins.cascade.thinker import (
    DEFAULT_INSTRUCTIONS,
    MAX_CALL_REPLY_TOKENS,
    MAX_REPLY_TOKENS,
    NOT_HEARD,
    SAY_AGAIN,
)

Message = dict[str, Any]
# What opens a call written in words, held from there on, never spoken: any
# brace. No grammar holds a server's model to one spelling (Qwen2.5-Coder-1.5B
# on llama.cpp's server wrote '{\n  "name": ...' in a code block, which the
# server's own parser missed), and braces are nothing a voice should say.
CALL_STARTS = (tc.OPEN, "{")


@dataclass(frozen=True, slots=True)
class _Tag:
    turn_id: int
    callable: tuple[Tool, ...] = ()  # the tools this reply may call


@dataclass(slots=True)
class _Reply:
    tag: _Tag
    splitter: ClauseSplitter = field(default_factory=ClauseSplitter)
    parser: tc.CallParser = field(default_factory=lambda: tc.CallParser(CALL_STARTS))
    steps: ReplySteps = field(default_factory=ReplySteps)  # its first token, first clause


@dataclass(slots=True)
class ChatState:
    """One session epoch's conversation, as planned."""

    fence: Fence
    started: bool = False  # the system message is in
    tools: ToolSet = NO_TOOLS  # the session's
    reply: _Reply | None = None
    unanswered: deque[str] = field(default_factory=deque)  # ids of calls made, in order
    call_ids: dict[str, str] = field(default_factory=dict)  # the session's id → the server's


class ChatThinker:
    """``ChatAdapter`` for any OpenAI-compatible chat server (module docstring).
    Stateless itself; per-request state is the ``ChatState`` ``open`` returns."""

    def __init__(self, *, default_instructions: str = DEFAULT_INSTRUCTIONS,
                 not_heard: str = NOT_HEARD, say_again: str = SAY_AGAIN,
                 max_reply_tokens: int = MAX_REPLY_TOKENS) -> None:
        self.default_instructions = default_instructions
        self.not_heard = not_heard
        self.say_again = say_again
        self.max_reply_tokens = max_reply_tokens

    def open(self, fence: Fence) -> ChatState:
        return ChatState(fence)

    def close(self, state: ChatState) -> None:
        state.reply = None

    # -- payloads → messages ------------------------------------------------------------

    def plan(self, state: ChatState, payload: Any) -> ChatChunk | None:
        if isinstance(payload, Context):
            return self._context(state, payload)
        if isinstance(payload, UserTurn):
            return self._user_turn(state, payload)
        if isinstance(payload, Draft):
            return None  # no guesses on a shared server (module docstring)
        if isinstance(payload, fx.StartResponse):
            return self._respond(state, payload)
        raise TypeError(f"cascade thinker cannot take {type(payload).__name__}")

    def _context(self, state: ChatState, ctx: Context) -> ChatChunk:
        messages = self._prologue(state, ctx.instructions)
        if ctx.tools is not None:
            state.tools = ctx.tools
        messages += render_history(ctx.items, lambda call_id: _answered(state, call_id))
        return ChatChunk(tuple(messages))

    def _user_turn(self, state: ChatState, turn: UserTurn) -> ChatChunk | None:
        text = turn.text.strip()
        if not text and not turn.respond:
            return None
        messages = self._prologue(state, None)
        if not text:  # respond to nothing: the fixed line, no model
            clause = Clause(turn.turn_id, self.not_heard, last=True)
            messages.append({"role": "assistant", "content": self.not_heard})
            return ChatChunk(tuple(messages), emit=(_result(clause),))
        messages.append({"role": "user", "content": text})
        if not turn.respond:
            return ChatChunk(tuple(messages))
        if turn.unsure and not state.tools.must_call:  # words that may be misheard
            clause = Clause(turn.turn_id, self.say_again, last=True)
            messages.append({"role": "assistant", "content": self.say_again})
            return ChatChunk(tuple(messages), emit=(_result(clause),))
        return self._reply_chunk(messages, turn.turn_id, state.tools)

    def _respond(self, state: ChatState, respond: fx.StartResponse) -> ChatChunk:
        tools = state.tools if respond.tools is None else respond.tools
        if respond.input is not None:  # out of band: its own prompt, beside the conversation
            instructions = (respond.instructions or "").strip() or self.default_instructions
            given = [h for h in map(history_item, respond.input) if h is not None]
            messages = [{"role": "system", "content": instructions},
                        *render_history(given, lambda call_id: call_id)]
            return replace(self._reply_chunk(messages, respond.fence.turn_id, tools),
                           detached=True)
        messages = self._prologue(state, None)
        if respond.instructions and respond.instructions.strip():
            messages.append({"role": "system", "content": respond.instructions.strip()})
        return self._reply_chunk(messages, respond.fence.turn_id, tools)

    def _prologue(self, state: ChatState, instructions: str | None) -> list[Message]:
        """The system message (first chunk), or a later Context's instructions."""
        text = (instructions or "").strip()
        if not state.started:
            state.started = True
            return [{"role": "system", "content": text or self.default_instructions}]
        return [{"role": "system", "content": text}] if text else []

    def _reply_chunk(self, messages: list[Message], turn_id: int, tools: ToolSet) -> ChatChunk:
        offered = tuple(_tool(t) for t in tools.tools)
        max_tokens = self.max_reply_tokens
        if tools.callable:
            max_tokens = max(max_tokens, MAX_CALL_REPLY_TOKENS)
        return ChatChunk(tuple(messages), generate=True, max_tokens=max_tokens, tools=offered,
                         tool_choice=_tool_choice(tools) if offered else None,
                         tag=_Tag(turn_id, tools.callable))

    # -- the reply → clauses and calls ----------------------------------------------------

    def on_text(self, state: ChatState, chunk: ChatChunk, delta: str) -> list[StageResult]:
        reply = self._reply(state, chunk)
        texts = reply.splitter.push(reply.parser.push(delta))
        return reply.steps.lead(reply.tag.turn_id,
                                [_result(Clause(reply.tag.turn_id, t, last=False))
                                 for t in texts])

    def on_end(self, state: ChatState, chunk: ChatChunk,
               reply: ChatReply) -> tuple[list[StageResult], ChatReply]:
        """The reply's last words, its checked calls, its end; and the reply as
        the conversation keeps it (its words, and its calls as ``tool_calls``)."""
        streamed = self._reply(state, chunk)
        state.reply = None
        tag = streamed.tag
        results = [_result(Clause(tag.turn_id, t, last=False))
                   for t in streamed.splitter.push(streamed.parser.finish())]
        rest = streamed.splitter.finish()
        written = [ChatToolCall(f"call_{tag.turn_id}_{i}", c.name, c.arguments)
                   for i, c in enumerate(streamed.parser.calls)]
        # under tool_choice none a call is not made: the reply is its words
        calls = [_checked(c, tag) for c in (*reply.calls, *written)] if tag.callable else []
        if rest or not calls:
            results.append(_result(Clause(tag.turn_id, rest, last=not calls)))
        if calls:
            results += [_result(ToolCall(tag.turn_id, c.name, c.arguments)) for c in calls]
            results.append(_result(Clause(tag.turn_id, "", last=True)))
            if not chunk.detached:
                state.unanswered.extend(c.call_id for c in calls)
        words = tc.CallParser(CALL_STARTS)
        kept = ChatReply(words.push(reply.text) + words.finish(), tuple(calls), reply.finish)
        return streamed.steps.lead(tag.turn_id, results), kept

    @staticmethod
    def _reply(state: ChatState, chunk: ChatChunk) -> _Reply:
        tag = chunk.tag
        assert isinstance(tag, _Tag)
        if state.reply is None or state.reply.tag is not tag:
            state.reply = _Reply(tag)
        return state.reply


def render_history(items: Any, answered: Any) -> list[Message]:
    """History items as chat messages: an assistant's words and the calls right
    after them are one assistant message; a call's output is a ``tool`` message
    (``answered``: the id the conversation knows the session's call by)."""
    messages: list[Message] = []
    for item in items:
        assert isinstance(item, HistoryItem)
        if item.kind == "function_call":
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments or "{}"}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": answered(item.call_id),
                             "content": item.text})
        elif item.text.strip():
            role = item.role if item.role in ("user", "assistant", "system") else "user"
            messages.append({"role": role, "content": item.text.strip()})
    return messages


def _answered(state: ChatState, call_id: str) -> str:
    """The id the server gave the call the session names ``call_id``: the oldest
    call not yet answered, the first time the session names it."""
    if call_id not in state.call_ids:
        state.call_ids[call_id] = state.unanswered.popleft() if state.unanswered else call_id
    return state.call_ids[call_id]


def _checked(call: ChatToolCall, tag: _Tag) -> ChatToolCall:
    tool = next((t for t in tag.callable if t.name == call.name), None)
    if tool is None:
        may = ", ".join(t.name for t in tag.callable) or "no tool"
        raise InvalidCall(f"the model called {call.name!r}, which this reply may not call "
                          f"(it may call {may})")
    return ChatToolCall(call.call_id, call.name,
                        checked_arguments(call.name, call.arguments, tool.parameters))


def _tool(tool: Tool) -> Message:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": dict(tool.parameters)}}


def _tool_choice(tools: ToolSet) -> Any:
    if tools.choice.mode == "function":
        return {"type": "function", "function": {"name": tools.choice.name}}
    return tools.choice.mode


def _result(payload: Clause | ToolCall) -> StageResult:
    return StageResult(payload, segment_finished=True, visible=False)
