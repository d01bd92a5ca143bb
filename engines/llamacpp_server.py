"""The few things ``engines.llamacpp`` needs from ``xllamacpp``: start a server,
stream one completion, and read what its chunks mean.

``xllamacpp.Server`` runs llama.cpp's HTTP server *in process* (no socket: its
``handle_completions`` takes the JSON body and calls back once per streamed
chunk). That call blocks its thread (with the GIL released) until the
completion ends; the callback runs with the GIL and returning ``True`` from it
ends the stream, which cancels the generation (llama.cpp cancels the task when
its reader goes away). Exceptions raised in the callback are swallowed by
xllamacpp's wrapper, so the callback here never raises: it records and stops.

llama.cpp's prompt cache does the resuming: each slot keeps the tokens of its
last prompt and generation, and a new prompt that starts with them prefills
only the rest (``timings.cache_n`` says how many were reused). Slots are
picked by prompt similarity, and a slot's cache that another prompt needs is
kept in RAM (``cache_ram_mib``) to be restored later.

``xllamacpp`` is imported lazily: importing this module needs only the
standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import Usage


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model: str  # a GGUF path, or a Hugging Face repo id "owner/name[:file.gguf]"
    n_ctx: int  # per slot (one session's context)
    parallel: int  # slots
    threads: int  # generation threads
    batch_threads: int  # prompt-processing threads
    cache_ram_mib: int = 512  # prompts of idle sessions kept in RAM


def start_server(config: ServerConfig) -> Any:
    """A started ``xllamacpp.Server`` (blocking: loads the model, ≈1–3 s; the
    GIL is held while it loads)."""
    import xllamacpp  # type: ignore[import-untyped,import-not-found,unused-ignore]

    params = xllamacpp.CommonParams()
    if Path(config.model).exists() or (":" not in config.model and config.model.count("/") != 1):
        params.model.path = config.model
    else:  # llama.cpp downloads it (its own cache; online machines only)
        repo, _, file = config.model.partition(":")
        params.model.hf_repo = repo
        if file:
            params.model.hf_file = file
    params.n_ctx = config.n_ctx * config.parallel  # split evenly over the slots
    params.n_parallel = config.parallel
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.batch_threads
    params.cache_ram_mib = config.cache_ram_mib
    params.cache_prompt = True
    params.ctx_shift = False  # a full context is the adapter's to compact, not llama.cpp's
    params.verbosity = -1  # llama.cpp's own log lines otherwise go to stderr per request
    return xllamacpp.Server(params)


@dataclass(frozen=True, slots=True)
class Delta:
    text: str
    finish: str | None = None  # "stop" (end of turn) or "length" (max_tokens)
    usage: Usage | None = None


class CompletionError(RuntimeError):
    """llama.cpp refused or failed a completion."""


class ContextOverflow(CompletionError):
    """The prompt does not fit a slot's context."""

    def __init__(self, message: str, prompt_tokens: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


def warm_prompt_cache(server: Any, prompt: str, sampling: Mapping[str, Any]) -> None:
    """Prefill ``prompt`` once (one token generated, dropped), so it sits in the
    prompt cache and llama.cpp's first-request allocations are done."""
    stream_completion(server, prompt, 1, sampling, lambda _: True)


def stream_completion(server: Any, prompt: str, max_tokens: int,
                      sampling: Mapping[str, Any], on_delta: Callable[[Delta], bool]) -> None:
    """Run one streamed completion of ``prompt`` (blocking); ``on_delta`` gets
    each chunk and returns True to stop. ChatML markers in ``prompt`` become
    their special tokens. Raises ``CompletionError``/``ContextOverflow``."""
    request = {**sampling, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
               "cache_prompt": True}
    failure: list[BaseException] = []

    def callback(data: Any) -> bool:
        try:
            return on_delta(parse_chunk(data))
        except BaseException as exc:  # xllamacpp would swallow it: keep it, stop
            failure.append(exc)
            return True

    server.handle_completions(request, callback)
    if failure:
        raise failure[0]


def parse_chunk(data: Any) -> Delta:
    """One streamed chunk (an OpenAI ``text_completion`` chunk, or an error)."""
    if not isinstance(data, dict):
        raise CompletionError(f"unexpected llama.cpp output {data!r:.200}")
    error = data.get("error")
    if error is not None or "code" in data:
        info = error if isinstance(error, dict) else data
        message = str(info.get("message", info))
        if info.get("type") == "exceed_context_size_error":
            raise ContextOverflow(message, int(info.get("n_prompt_tokens", 0)))
        raise CompletionError(f"llama.cpp: {message}")
    choices = data.get("choices") or [{}]
    choice = choices[0]
    text = choice.get("text") or ""
    finish = choice.get("finish_reason")
    return Delta(str(text), finish, parse_usage(data) if finish else None)


def parse_usage(data: Mapping[str, Any]) -> Usage | None:
    """A streamed chunk's ``usage`` (and llama.cpp's ``timings``), if it has one:
    the OpenAI field ``prompt_tokens_details.cached_tokens``, or llama.cpp's
    ``timings.cache_n``, says how much of the prompt came from the cache."""
    usage, timings = data.get("usage"), data.get("timings") or {}
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or {}
    return Usage(prompt_tokens=int(usage.get("prompt_tokens", 0)),
                 cached_tokens=int(details.get("cached_tokens", timings.get("cache_n", 0))),
                 completion_tokens=int(usage.get("completion_tokens", 0)),
                 prompt_ms=float(timings.get("prompt_ms", 0.0)),
                 predicted_ms=float(timings.get("predicted_ms", 0.0)))


class TokenEstimate:
    """Tokens of a text, estimated from characters. xllamacpp has no tokenizer
    call, so the engine counts its contexts exactly from each completion's
    ``usage`` and only *estimates* text it has not sent yet: by the highest
    tokens-per-character ratio seen so far, plus a margin, so it errs towards
    restarting early, never towards overflowing (and an overflow the server
    reports still restarts the request)."""

    def __init__(self, initial_ratio: float = 0.5, margin: float = 1.15) -> None:
        self._ratio = initial_ratio
        self._margin = margin
        self._seen = False

    def learn(self, text: str, tokens: int) -> None:
        if len(text) < 64 or tokens <= 0:  # short texts say little
            return
        ratio = tokens / len(text)
        self._ratio = max(ratio, self._ratio) if self._seen else ratio
        self._seen = True

    def __call__(self, text: str) -> int:
        return math.ceil(len(text) * self._ratio * self._margin) + 2 if text else 0
