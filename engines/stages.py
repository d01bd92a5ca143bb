"""What a plugin hands the engines: stage descriptors and the model code they run.

A plugin describes each of its stages (``InProcessStage``, ``LlamaCppStage``,
``ResumableLlmStage``, ``ChatServerStage``) and ``engines.build_engine`` turns
each into its engine. The model code is synchronous and plugin-private: a
``StageModel`` steps one payload at a time; a ``ResumableAdapter`` maps
payloads onto one resumable LLM request (``PromptChunk``s in, generated text
out); a ``ChatAdapter`` maps them onto one conversation on a model server apart
from the gateway (``ChatChunk``s in, streamed text out). Each yields
``StageResult``s, which the orchestrator routes without looking inside.

A request carries the ``tag`` its submitter gave it (the gateway's is the
session's fence): the engine hands it to ``open`` and never reads it. Nothing
here knows about sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

MAX_PENDING_INPUTS = 256  # an in-process stage's, per request, unless it asks for more


@dataclass(frozen=True, slots=True)
class StageResult:
    """One output of a stage model.

    ``segment_finished`` outputs are forwarded to the next stage (if any) as its
    input; ``visible`` ones are also projected for the session.
    """

    payload: Any
    segment_finished: bool = True
    visible: bool = False


# -- the model code ----------------------------------------------------------------


class StageModel(Protocol):
    """Synchronous model code for one stage; called on a worker thread (on the
    event loop for ``InProcessStage(threads=0)``).

    One ``StageModel`` serves every session of a process; per-request state is
    what ``open`` returns.
    """

    def open(self, tag: Any) -> Any:
        """Start a resumable request (``tag``: the request's, as submitted); returns
        its state. Every payload, the first included, then arrives through ``step``."""
        ...

    def step(self, state: Any, payload: Any) -> Iterator[StageResult]:
        """Feed one input unit; yields outputs as they are ready."""
        ...

    def close(self, state: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class PromptChunk:
    """One piece of a resumable request's prompt.

    ``text`` is tokenised by the engine's tokenizer without special-token
    insertion (ChatML markers in the text become their special tokens);
    ``token_ids``, when given, are used as is instead. ``generate=False``: the
    chunk only extends the context (``max_tokens`` is then ignored: 1, output
    dropped). ``emit`` are results delivered when the chunk's turn comes (after
    every earlier chunk's output), e.g. a canned reply. ``tag`` is the
    adapter's own label, handed back with the chunk in ``on_text``.

    ``speculative``: a guess at the next generating chunk (e.g. the reply to
    the words heard so far, planned before the turn ends). It changes nothing
    in the context: an engine may start generating it ahead, holding what it
    generates (no ``on_text``), and *adopts* it when the next chunk planned
    generates from the same ``text``: the held text then goes to ``on_text``
    as that chunk's, and generation goes on. Any other next chunk, or a newer
    guess, throws it away; so does an engine that is busy. A speculative chunk
    that does not generate withdraws the guess (stops it, if it runs). An
    engine may ignore guesses altogether (the vLLM engine does).

    ``sampling``: completion options for this chunk's generation only, merged
    over the stage's ``sampling`` (e.g. llama.cpp's ``grammar`` for a tool
    call). Engine-specific: the llama.cpp engine merges them; the vLLM engine
    ignores them. A guess is adopted only by a chunk with the same options.

    ``detached``: a one-shot generating chunk beside the conversation (an
    out-of-band reply): ``text`` is its whole prompt, and neither it nor its
    generation enters the request's context, which the next chunk continues
    as if it had not run. It runs in the request's order like any chunk. An
    engine that cannot run one fails the request (the vLLM engine).
    """

    text: str = ""
    token_ids: tuple[int, ...] | None = None
    generate: bool = False
    max_tokens: int = 1
    emit: tuple[StageResult, ...] = ()
    tag: Any = None
    speculative: bool = False
    sampling: Mapping[str, Any] | None = None
    detached: bool = False


class ResumableAdapter(Protocol):
    """Plugin code that maps a stage's payloads onto one resumable LLM request.

    Every method is called on the engine's thread, one request's calls in
    order, never concurrently for the same request.
    """

    def open(self, tag: Any) -> Any:
        """A new request (``tag``: the request's, as submitted); returns its state."""
        ...

    def plan(self, state: Any, payload: Any) -> PromptChunk | None:
        """The chunk for one payload (``None``: nothing to add). Called when the
        payload is submitted, possibly while earlier chunks still generate:
        ``state`` should track the context *as planned*. A ``speculative``
        chunk must leave ``state`` as it was (it is only a guess)."""
        ...

    def on_text(self, state: Any, chunk: PromptChunk, delta: str,
                finished: bool) -> Sequence[StageResult]:
        """Generated text of ``chunk`` (a generating chunk); ``finished`` on its
        last delta (which may be ""). Returns the stage's outputs."""
        ...

    def restart(self, state: Any, chunk: PromptChunk, budget: int,
                count_tokens: Callable[[str], int]) -> PromptChunk | None:
        """The context is full: a self-contained replacement for ``chunk`` (same
        ``generate``/``max_tokens``/``tag``) that re-creates the conversation
        compactly in at most ``budget`` tokens, or ``None`` to fail the request."""
        ...

    def close(self, state: Any) -> None: ...


@runtime_checkable
class GuessReader(Protocol):
    """A ``ResumableAdapter`` that reads a guess's text while it is held
    (``PromptChunk.speculative``), to prepare for its adoption (the cascade's
    thinker has the talker synthesise the guess's first clause). Its outputs
    are forwarded like any other, but a guess may still be dropped: they must
    say nothing to the session (not ``visible``), and the stage after must hold
    what it makes of them until the adopted chunk's own outputs confirm it."""

    def on_guess_text(self, state: Any, chunk: PromptChunk, delta: str,
                      finished: bool) -> Sequence[StageResult]: ...


# -- the stages: which engine runs which model code --------------------------------


@dataclass(frozen=True, slots=True)
class InProcessStage:
    """A stage whose ``StageModel`` runs on ``threads`` worker threads of this
    process; ``threads=0`` runs it on the event loop, which only a model whose
    every step takes microseconds and never blocks may ask for (``engines.on_loop``).
    ``max_pending_inputs``: a request's inputs that may wait behind a step;
    beyond them a submit raises ``Backpressure`` (``engines.in_process``)."""

    name: str
    model: StageModel
    threads: int = 1
    max_pending_inputs: int = MAX_PENDING_INPUTS


@dataclass(frozen=True, slots=True)
class ResumableLlmStage:
    """A stage served by a vLLM engine: one resumable request per session epoch
    (``AsyncLLM`` with streaming input).

    ``adapter`` turns payloads into prompt chunks and generated text into stage
    results.
    """

    name: str
    adapter: ResumableAdapter
    model_dir: Path
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    sampling: Mapping[str, Any] | None = None  # vLLM SamplingParams fields


@dataclass(frozen=True, slots=True)
class LlamaCppStage:
    """A stage served by an in-process llama.cpp server (``xllamacpp``): one
    resumable request per session epoch, continued through llama.cpp's prompt
    cache, so each turn prefills only its new tokens.

    ``model`` is a GGUF file's path, or a Hugging Face repo id
    (``owner/name`` or ``owner/name:file.gguf``) that llama.cpp downloads
    (online machines only); ``n_ctx`` the context of one session (one
    llama.cpp slot), ``parallel`` how many slots generate at once (sessions
    beyond that wait for a slot; their prompts are kept in llama.cpp's RAM
    cache), ``threads`` the CPU threads of the model.
    """

    name: str
    adapter: ResumableAdapter
    model: str
    n_ctx: int = 4096
    threads: int = 1
    parallel: int = 4
    sampling: Mapping[str, Any] | None = None  # llama.cpp completion fields
    # prefilled once before the engine is ready (the prompt every session starts
    # with), so a first turn finds it in the prompt cache as later turns do
    warm_prompt: str = ""




# -- a thinker on a model server apart from the gateway -----------------------------


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One piece of a conversation held on an OpenAI-compatible chat server
    (``engines.chat_server``): chat ``messages`` appended to the request's
    conversation, the analogue of ``PromptChunk`` for a server that takes
    messages, not raw text.

    ``generate``: the conversation so far (this chunk included) is sent as one
    streamed chat completion, offering ``tools`` (OpenAI ``tools`` entries)
    under ``tool_choice``; its text goes to the adapter's ``on_text`` and its
    end to ``on_end``, which returns the reply as the conversation keeps it
    (an assistant message). A chunk that does not generate only extends the
    conversation (nothing is sent: the next generating chunk carries it).
    ``emit``, ``tag``, ``max_tokens`` and ``detached`` mean what they mean on
    a ``PromptChunk`` (a ``detached`` chunk's ``messages`` are its whole
    prompt, and the conversation stays as it was). There are no guesses: a
    model server is shared, so a reply it might throw away is not asked for.
    """

    messages: tuple[Mapping[str, Any], ...] = ()
    generate: bool = False
    max_tokens: int = 1
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: Any = None  # "auto", "none", "required" or {"type": "function", ...}
    emit: tuple[StageResult, ...] = ()
    tag: Any = None
    detached: bool = False


@dataclass(frozen=True, slots=True)
class ChatToolCall:
    """A call a chat reply made, as the server streamed it (``arguments`` the
    JSON text it wrote, not yet checked)."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatReply:
    """A chat completion's whole reply: its words, its calls and why it ended."""

    text: str
    calls: tuple[ChatToolCall, ...] = ()
    finish: str | None = None  # "stop", "length", "tool_calls"


class ChatAdapter(Protocol):
    """Plugin code that maps a stage's payloads onto one conversation on a chat
    server. As with ``ResumableAdapter``, one request's calls come in order,
    never concurrently; ``plan`` is called when a payload is submitted,
    possibly while an earlier chunk still generates."""

    def open(self, tag: Any) -> Any: ...

    def plan(self, state: Any, payload: Any) -> ChatChunk | None: ...

    def on_text(self, state: Any, chunk: ChatChunk, delta: str) -> Sequence[StageResult]:
        """Streamed words of ``chunk``'s reply."""
        ...

    def on_end(self, state: Any, chunk: ChatChunk,
               reply: ChatReply) -> tuple[Sequence[StageResult], ChatReply]:
        """The reply ended: its last outputs (its calls among them), and the reply
        as the conversation keeps it. Raising fails the request (e.g. a call
        that breaks its tool's schema)."""
        ...

    def close(self, state: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class ModelServer:
    """An OpenAI-compatible server apart from the gateway (``--llm-url``).

    ``url`` is its API base (``http://HOST:PORT/v1``); ``model`` the name sent
    (None: the first of its ``/models``); ``timeout_s`` the longest the server
    may stay silent (to connect, to answer, between two streamed chunks);
    ``max_streams`` the streams one gateway process keeps open on it, and
    ``max_waiting`` the requests that may wait for one (more fail at once).
    """

    url: str
    api_key: str | None = None
    model: str | None = None
    timeout_s: float = 10.0
    max_streams: int = 16
    max_waiting: int = 64


@dataclass(frozen=True, slots=True)
class ChatServerStage:
    """A stage served by a chat server apart from the gateway: one conversation
    per session epoch, sent whole each turn as a stable prefix (the same bytes,
    new messages appended), so the server's prefix cache prefills only the new
    turn (``engines.chat_server``)."""

    name: str
    adapter: ChatAdapter
    server: ModelServer
    sampling: Mapping[str, Any] | None = None  # chat completion fields (temperature, ...)


Stage = InProcessStage | ResumableLlmStage | LlamaCppStage | ChatServerStage
