"""What ``engines.vllm`` hands vLLM for each chunk, and what it reads back about
the model: token prompts, sampling parameters, streaming inputs and the model's
context length.

These are the engine's points of contact with vLLM's own types, whose layout
moves between versions (the token prompt it takes without re-rendering, for one),
so they are met here alone. vLLM is imported lazily: importing this module needs
only the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_MAX_MODEL_LEN = 2048  # when the AsyncLLM does not say


def tokens_prompt(tokens: list[int]) -> Any:
    """A token prompt in the form this vLLM takes without re-rendering."""
    try:
        from vllm.inputs.engine import tokens_input  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:  # older or newer layouts: the public TypedDict
        from vllm.inputs import TokensPrompt  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return TokensPrompt(prompt_token_ids=tokens)
    return tokens_input(tokens)


def sampling_params(sampling: Mapping[str, Any], max_tokens: int, *,
                    context_only: bool = False) -> Any:
    """``SamplingParams`` of a chunk: ``sampling`` (the stage's settings) for up to
    ``max_tokens``, streamed as deltas."""
    from vllm import SamplingParams  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from vllm.sampling_params import RequestOutputKind  # type: ignore[import-untyped,import-not-found,unused-ignore]

    # context only: whatever it samples is dropped, so sample cheaply
    settings = {"temperature": 0.0} if context_only else dict(sampling)
    return SamplingParams(**settings, max_tokens=max_tokens,
                          output_kind=RequestOutputKind.DELTA)


def streaming_input(tokens: list[int], params: Any) -> Any:
    """One chunk of a resumable request: its tokens, sampled with ``params``."""
    from vllm.engine.protocol import StreamingInput  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return StreamingInput(prompt=tokens_prompt(tokens), sampling_params=params)


def max_model_len(llm: Any) -> int:
    """The context length the AsyncLLM was built with (where this vLLM keeps it)."""
    for owner in (getattr(llm, "model_config", None),
                  getattr(getattr(llm, "vllm_config", None), "model_config", None)):
        value = getattr(owner, "max_model_len", None)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_MAX_MODEL_LEN
