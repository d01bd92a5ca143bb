"""Hostile and careless client messages, for the fuzz tests and ``bench/fuzz.py``.

``REGRESSIONS`` are the exact inputs of issue 10, each with the error code it
must get. ``Hostile`` makes any number of others, fast (plain ``random``, seeded):
a valid command with exactly one thing wrong with it, so every one of them is
answered by exactly one ``error`` event and changes nothing (a property the e2e
test asserts). ``strategy()`` is the same space for Hypothesis.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import strategies as st

DEEP = 10_000


def deep(depth: int, opener: str = "[", leaf: str = "1") -> str:
    """``depth`` nested arrays (or objects) around ``leaf``, built as text (json.dumps
    itself recurses)."""
    if opener == "[":
        return "[" * depth + leaf + "]" * depth
    return '{"a":' * depth + leaf + "}" * depth


# name: (text frame, error code)
REGRESSIONS: dict[str, tuple[str, str]] = {
    "audio_end_ms_1e400": ('{"type": "conversation.item.truncate", "item_id": "item_1", '
                           '"audio_end_ms": 1e400}', "decimal_above_max_value"),
    "audio_end_ms_huge_int": ('{"type": "conversation.item.truncate", "item_id": "item_1", '
                              '"audio_end_ms": 1' + "0" * 400 + "}", "integer_above_max_value"),
    "server_event_seq_huge": ('{"type": "session.event_ack", "server_event_seq": '
                              + "9" * 30 + "}", "integer_above_max_value"),
    "played_ms_minus_1e400": ('{"type": "playback.ack", "played_ms": -1e400}',
                              "decimal_below_min_value"),
    "deep_arrays": (deep(DEEP), "json_too_deep"),
    "deep_objects": ('{"type": "session.update", "session": ' + deep(DEEP, "{") + "}",
                     "json_too_deep"),
    "deep_unclosed": ("[" * 100_000, "json_too_deep"),
    "surrogate_event_id": ('{"type": "session.heartbeat", "event_id": "\\ud800"}',
                           "invalid_value"),
    "surrogate_item_id": ('{"type": "conversation.item.create", "item": {"id": "\\ud800", '
                          '"type": "message", "role": "user", "content": []}}', "invalid_value"),
    "surrogate_instructions": ('{"type": "session.update", "session": '
                               '{"instructions": "be \\udfff brief"}}', "invalid_value"),
    "surrogate_key": ('{"type": "response.create", "response": {"metadata": '
                      '{"\\ud83d": "v"}}}', "invalid_value"),
    "surrogate_close_reason": ('{"type": "session.close", "reason": "\\ud800"}',
                               "invalid_value"),
    "nan": ('{"type": "playback.ack", "played_ms": NaN}', "invalid_json"),
}

VALID: list[dict[str, Any]] = [
    {"type": "session.update", "session": {"instructions": "words=2", "voice": "v",
                                           "audio": {"input": {"turn_detection": {
                                               "type": "server_vad", "threshold": 0.5}}}}},
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\0\0" * 8).decode()},
    {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0,
     "audio_end_ms": 10},
    {"type": "conversation.item.create", "previous_item_id": None, "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}},
    {"type": "response.create", "response": {"instructions": "x", "metadata": {"k": "v"},
                                             "output_modalities": ["audio"]}},
    {"type": "response.cancel", "response_id": "resp_x"},
    {"type": "playback.ack", "played_ms": 10, "truncate": False},
    {"type": "session.event_ack", "server_event_seq": 1},
    {"type": "conversation.item.retrieve", "item_id": "item_x"},
    {"type": "conversation.item.delete", "item_id": "item_x"},
    {"type": "session.close", "reason": "bye"},
]

# a wrong value for a field, whatever command carries it: each is refused
WRONG: dict[str, list[Any]] = {
    "type": [5, None, "session.frobnicate", "", ["session.update"]],
    "session": ["x", [], 3, True],
    "audio": [12, [], "not base64!", "AAA"],
    "item_id": [[], 5, "", {}],
    "content_index": ["0", -1, 1.5, True],
    "audio_end_ms": ["10", -1, 2.5, False, None],
    "item": ["x", [], 7],
    "response": ["x", 3],  # not [] or {}: an empty "response" means the defaults
    "response_id": [3, [], {}],
    "played_ms": ["10", -3, True, None],
    "truncate": ["yes", 1, []],
    "server_event_seq": ["3", 1.5, -1, None],
    "reason": [{}, [], 3],
    "previous_item_id": [1, [], {}],
    "instructions": [1, [], {}],
    "voice": [["alloy"], 1],
    "threshold": [1.5, "high", True, -0.1],
    "metadata": ["m", 1, []],
    "output_modalities": [["video"], [], "audio"],
    "role": ["robot", 1],
    "content": ["hi", 5, [1]],
}


class Hostile(random.Random):
    """A seeded source of messages that are each refused with one ``error``."""

    def message(self) -> str | bytes:
        """One frame: text (JSON or junk) or binary (odd-length PCM16, never valid)."""
        if self.random() < 0.04:
            return self.randbytes(self.randrange(1, 400) | 1)
        mutate = self.choice(self._mutations)
        return mutate(self, copy.deepcopy(self.choice(VALID)))

    def _leaf_path(self, obj: dict[str, Any]) -> list[Any]:
        """A random path down ``obj`` to a leaf or a container (at least one key)."""
        path: list[Any] = []
        node: Any = obj
        while isinstance(node, dict | list) and node and (not path or self.random() < 0.6):
            key = self.choice(list(node)) if isinstance(node, dict) else self.randrange(len(node))
            path.append(key)
            node = node[key]
        return path or ["type"]

    def _put(self, obj: dict[str, Any], value: Any) -> dict[str, Any]:
        path = self._leaf_path(obj)
        node: Any = obj
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return obj

    def _surrogate(self, obj: dict[str, Any]) -> str:
        lone = chr(self.randrange(0xD800, 0xE000))
        if self.random() < 0.3:
            obj["event_id"] = "evt_" + lone
            return json.dumps(obj)
        return json.dumps(self._put(obj, "x" + lone + "y"))

    def _huge(self, obj: dict[str, Any]) -> str:
        digits = self.choice([17, 20, 30, 400, 5000])
        value = self.choice(["1e400", "-1e400", "1" + "0" * digits, "-9" + "9" * digits,
                             "9007199254740992", "2.5e308"])
        return json.dumps(self._put(obj, "@@")).replace('"@@"', value)

    def _deep(self, obj: dict[str, Any]) -> str:
        nested = deep(self.choice([33, 100, 1000, DEEP]), self.choice("[{"))
        return json.dumps(self._put(obj, "@@")).replace('"@@"', nested)

    def _wrong_type(self, obj: dict[str, Any]) -> str:
        key = self.choice(sorted(_keys(obj) & WRONG.keys()))
        value = self.choice(WRONG[key])
        _replace_key(obj, key, value)
        return json.dumps(obj)

    def _junk(self, obj: dict[str, Any]) -> str:
        text = json.dumps(obj)
        match self.randrange(4):
            case 0:
                return text[: self.randrange(1, len(text))]  # a prefix of an object
            case 1:
                return json.dumps(self.choice([[], 1, "x", None, [obj]]))  # not an object
            case 2:
                return text[:-1] + ', "x": NaN}'  # Python's extension, not JSON
            case _:
                return self.randbytes(self.randrange(1, 60)).decode("latin-1")  # not JSON

    _mutations: ClassVar[list[Callable[[Hostile, dict[str, Any]], str]]] = [
        _surrogate, _huge, _deep, _wrong_type, _junk]


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node).union(*(_keys(child) for child in node.values()))
    if isinstance(node, list):
        return set().union(*(_keys(child) for child in node))
    return set()


def _replace_key(node: Any, key: str, value: Any) -> bool:
    """Set the first ``key`` found (depth first) in ``node`` to ``value``."""
    if isinstance(node, dict):
        if key in node:
            node[key] = value
            return True
        return any(_replace_key(child, key, value) for child in node.values())
    if isinstance(node, list):
        return any(_replace_key(child, key, value) for child in node)
    return False


def strategy() -> st.SearchStrategy[str | bytes]:
    """Hostile frames as a Hypothesis strategy: ``Hostile`` under a drawn seed."""
    return st.integers(0, 2**32 - 1).map(lambda seed: Hostile(seed).message())
