"""Helpers for the vLLM engine tests: an output router, a tiny random model, a
loop-lag probe. Nothing here imports vLLM at module level."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import engine_router

from engines import build_engine
from engines.stages import ResumableAdapter, ResumableLlmStage
from engines.vllm import VllmEngine


def smollm2_engine(adapter: ResumableAdapter, *, max_model_len: int = 2048) -> VllmEngine:
    """The cascade's thinker engine as the gateway builds it (``build_engine`` on the
    plugin's stage), on a shorter context; converts the bundled model on first use."""
    from plugins.cascade.model_cache import smollm2_model_dir
    from plugins.cascade.thinker import ENGINE_ARGS, SAMPLING

    stage = ResumableLlmStage("think", adapter, smollm2_model_dir(),
                              {**ENGINE_ARGS, "max_model_len": max_model_len}, SAMPLING)
    engine = build_engine(1, stage)
    assert isinstance(engine, VllmEngine)
    return engine

# -- outputs ---------------------------------------------------------------------------


class Router(engine_router.Router):
    forwarded_only = True


def running(engine: VllmEngine) -> contextlib.AbstractAsyncContextManager[engine_router.Router]:
    """``engine.run()`` as a task (ready on entry), its outputs routed (every
    clause a forwarded segment); on exit the run is cancelled (which shuts the
    AsyncLLM down)."""
    return engine_router.running(engine, Router)


# -- event-loop lag ------------------------------------------------------------------


@dataclass
class LagProbe:
    """Sleeps ``period`` s in a loop and records how late each wake-up is."""

    period: float = 0.005
    lags: list[float] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self.lags.append(time.perf_counter() - t - self.period)

    async def stop(self) -> dict[str, float]:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        lags = sorted(self.lags) or [0.0]

        def pct(p: float) -> float:
            return 1000 * lags[min(len(lags) - 1, int(p * len(lags)))]

        return {"n": len(lags), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": 1000 * lags[-1]}


# -- memory --------------------------------------------------------------------------


def rss_mb() -> dict[str, float]:
    """RSS of this process and its children (the vLLM engine core) in MB."""
    import psutil

    me = psutil.Process()
    out = {"self": me.memory_info().rss / 1e6}
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out[f"{child.name()}:{child.pid}"] = child.memory_info().rss / 1e6
    return out


def report(name: str, data: Any) -> None:
    """Print a measurement (visible with -s) and append it to $THINKER_REPORT."""
    line = json.dumps({"name": name, "load": os.getloadavg(), **({"data": data})}, default=str)
    print(f"\n[measure] {line}")
    path = os.environ.get("THINKER_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# -- a tiny random model -------------------------------------------------------------

TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tiny_model(out: Path) -> Path:
    """A random 2-layer Llama (hidden 64, 2 heads of 32: vLLM's CPU attention needs
    head_dim ≥ 32) with a byte-level BPE tokenizer trained here (vocab 1024,
    ChatML specials). Offline, ≈2 s."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [inspect.getsource(m) for m in (asyncio.events, asyncio.queues, json.decoder,
                                             contextlib, inspect)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=TINY_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", unk_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=32, max_position_embeddings=1024, tie_word_embeddings=True,
                         bos_token_id=tok.token_to_id("<|im_start|>"),
                         eos_token_id=tok.token_to_id("<|im_end|>"),
                         pad_token_id=tok.token_to_id("<|endoftext|>"))
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t
