"""The core runs on the standard library alone; orjson and pybase64 only speed it up.

A fresh interpreter whose import system finds neither (a meta-path finder that
raises ``ImportError`` for them, as on a machine without them) imports every
core module and decodes a corpus of tricky frames and audio; it must answer
each exactly as an interpreter with both does. In this process the same is
checked as a property, with the speed-ups switched off and on.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hostile import REGRESSIONS, VALID, Hostile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import duplex
from duplex import commands, speedups, wire
from duplex.errors import InvalidRequest

REPO = Path(duplex.__file__).parent.parent
CORE_MODULES = sorted(f"duplex.{p.stem}" for p in (REPO / "duplex").glob("*.py")
                      if p.stem != "__init__")
LIMIT = 4 * 1024 * 1024
SPEEDUPS = ["orjson", "pybase64"]

PROBE = r"""
import importlib, json, sys

class Missing:
    "Finds the blocked packages missing, as on a machine without them."
    def __init__(self, names):
        self.names = set(names)
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ImportError(f"{name} is blocked")
        return None

job = json.loads(sys.stdin.read())
sys.meta_path.insert(0, Missing(job["blocked"]))
for module in job["core"]:
    importlib.import_module(module)
from duplex import commands, speedups, wire
from duplex.errors import InvalidRequest

def outcome(decode, text):
    try:
        return ["value", repr(decode(text))]
    except InvalidRequest as exc:
        return ["refusal", exc.code, exc.param, exc.message, exc.event_id]

print(json.dumps({
    "fast": [speedups.json_loads is not None, speedups.base64_decode is not None],
    "loaded": sorted(n for n in sys.modules if n.partition(".")[0] in job["speedups"]),
    "frames": [outcome(lambda t: wire.decode_command(t, max_bytes=job["limit"]), t)
               for t in job["frames"]],
    "values": [outcome(lambda t: wire.decode_json(t, max_bytes=job["limit"]), t)
               for t in job["frames"]],
    "audio": [outcome(commands.decode_base64_audio, t) for t in job["audio"]],
}))
"""

# numbers at every edge where orjson and the stdlib read apart, strings that are
# not Unicode text, duplicate keys, escapes, a BOM, whitespace, nesting at the limit
TRICKY_FRAMES = [
    "18446744073709551616", "-9223372036854775809", "9223372036854775807", "9007199254740992",
    "9007199254740991", "-9007199254740991", "1e20", "1e400", "-1e400", "1e-400", "-0", "-0.0",
    "0.1", "1.0", "1E2", "5e-324", "1.7976931348623157e308", "NaN", "Infinity", "-Infinity",
    '"\\ud800"', '"\\udc00x"', '"\\ud83d\\ude00"', '"é\\u00e9"', '"\\u0000"', "\ufeff{}",
    '{"a": 1, "a": 2}', ' {"type" : "session.close" } ', "[" * 32 + "]" * 32,
    "[" * 33 + "]" * 33, '{"type": "x", "a": ' + "[" * 40 + "]" * 40 + "}", "", "nul",
    '{"type": "session.update", "session": {"instructions": "héllo ✓ 😀"}}',
    '{"type": "playback.ack", "played_ms": 1.5e3, "truncate": true}',
]
TRICKY_AUDIO = ["", "QUJD", "QUJD====", "QUJD=", "QUJ", "QU JD", "QUJD\n", "QUJDé", "-_-_",
                "QQ==QQ==", "QUJDRA", "QUJDRA==", base64.b64encode(bytes(range(256))).decode()]


def corpus() -> tuple[list[str], list[str]]:
    """Frames and audio texts: the tricky ones, issue 10's, valid commands, and a
    seeded sample of hostile ones."""
    source = Hostile(11)
    hostile = [m for m in (source.message() for _ in range(400)) if isinstance(m, str)]
    frames = [*TRICKY_FRAMES, *(text for text, _ in REGRESSIONS.values()),
              *(json.dumps(command, ensure_ascii=False) for command in VALID), *hostile]
    audio = [*TRICKY_AUDIO, *(a for a in map(audio_of, hostile) if a is not None)]
    return frames, audio


def audio_of(frame: str) -> str | None:
    try:
        command = wire.decode_json(frame, max_bytes=LIMIT)
    except InvalidRequest:
        return None
    audio = command.get("audio") if isinstance(command, dict) else None
    return audio if isinstance(audio, str) else None


def decoded_by_a_fresh_core(frames: list[str], audio: list[str], *,
                            blocked: list[str]) -> dict[str, Any]:
    job = {"blocked": blocked, "speedups": SPEEDUPS, "core": CORE_MODULES, "limit": LIMIT,
           "frames": frames, "audio": audio}
    proc = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(job),
                          capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def test_the_core_answers_the_same_without_its_speed_ups() -> None:
    frames, audio = corpus()
    fast = decoded_by_a_fresh_core(frames, audio, blocked=[])
    alone = decoded_by_a_fresh_core(frames, audio, blocked=SPEEDUPS)
    assert fast["fast"] == [True, True] and fast["loaded"] != []  # both were there to compare
    assert alone["fast"] == [False, False]
    assert alone["loaded"] == []  # neither imported, not even in part
    for key in ("frames", "values", "audio"):
        assert alone[key] == fast[key], key
    # the corpus reaches both sides of the wire: values, refusals, decoded audio
    assert {o[0] for o in alone["frames"]} == {"value", "refusal"}
    assert any(o == ["value", "b'ABC'"] for o in alone["audio"])  # QUJD==== : the stdlib's


# -- in this process: the same answers with each speed-up switched off ---------------


@contextmanager
def without_speedups() -> Iterator[None]:
    saved = speedups.json_loads, speedups.base64_decode
    speedups.json_loads = speedups.base64_decode = None
    try:
        yield
    finally:
        speedups.json_loads, speedups.base64_decode = saved


def outcome(decode: Callable[[str], object], text: str) -> tuple[object, ...]:
    """Exactly what ``decode`` answers: the value's repr (1 and 1.0, 0.0 and -0.0
    differ) or the whole refusal."""
    try:
        return ("value", repr(decode(text)))
    except InvalidRequest as exc:
        return ("refusal", exc.code, exc.param, exc.message, exc.event_id)


def both_ways(decode: Callable[[str], object], text: str) -> tuple[tuple[object, ...], ...]:
    with without_speedups():
        alone = outcome(decode, text)
    return outcome(decode, text), alone


def test_the_speed_ups_are_there_to_compare() -> None:
    assert speedups.json_loads is not None
    assert speedups.base64_decode is not None


def test_a_missing_speed_up_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SPEEDUPS:
        monkeypatch.setitem(sys.modules, name, None)  # its import now raises ImportError
    assert speedups.find_json_loads() is None
    assert speedups.find_base64_decode() is None


def read_json(text: str) -> object:
    return wire.decode_json(text, max_bytes=LIMIT)


@pytest.mark.parametrize("text", TRICKY_FRAMES)
def test_tricky_frames_read_alike(text: str) -> None:
    fast, alone = both_ways(read_json, text)
    assert fast == alone


@pytest.mark.parametrize("text", TRICKY_AUDIO)
def test_tricky_audio_decodes_alike(text: str) -> None:
    fast, alone = both_ways(commands.decode_base64_audio, text)
    assert fast == alone


JSONISH = st.text(st.sampled_from('{}[]",:0123456789.eE+-tnrufalse\\u "dé\ud800 '),
                  max_size=40)
NUMBERS = (st.integers(-(2**70), 2**70).map(str)
           | st.floats(allow_nan=False, allow_infinity=False).map(repr)
           | st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**20), 10**20),
                       st.integers(-400, 400)))


@settings(max_examples=1000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH | NUMBERS | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=12,
).map(json.dumps))
def test_any_text_reads_alike(text: str) -> None:
    fast, alone = both_ways(read_json, text)
    assert fast == alone


@settings(max_examples=500, deadline=None, database=None)
@given(st.text(st.sampled_from("AQUJDRab+/=-_ \n\x00é"), max_size=24)
       | st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()))
def test_any_audio_decodes_alike(text: str) -> None:
    fast, alone = both_ways(commands.decode_base64_audio, text)
    assert fast == alone
