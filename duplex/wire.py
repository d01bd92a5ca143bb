"""The one place client text becomes a JSON value: total, bounded, sans-I/O.

Both socket protocols decode every text frame here (``/v1/realtime`` client
events, Twilio messages) and nowhere else, so each limit holds everywhere:

- size: at most ``max_bytes`` of UTF-8 (``event_too_large``);
- syntax: RFC 8259 JSON, without Python's ``NaN``/``Infinity`` (``invalid_json``);
- depth: at most ``MAX_DEPTH`` nested arrays and objects (``json_too_deep``),
  counted on the text before the parser sees it: Python's parser recurses, and
  deep input raises ``RecursionError``, which is not a ``ValueError``;
- numbers: integers within ±``MAX_INT`` (2**53 − 1, the range every JSON peer
  reads exactly; I-JSON, RFC 7493) and finite floats (``1e400`` parses to inf):
  ``integer_above_max_value`` / ``integer_below_min_value`` /
  ``decimal_above_max_value`` / ``decimal_below_min_value``, as OpenAI names them;
- strings, object keys included: Unicode text (``invalid_value``). ``"\\ud800"`` is
  valid JSON syntax, but it decodes to a lone surrogate, which no UTF-8 encoder
  takes: not Redis, not a close frame, not a socket.

A refusal is an ``InvalidRequest`` whose ``param`` is the dotted path of the
offending value (``session.audio.input.turn_detection.threshold``), with the
client's ``event_id`` when it has a usable one. Nothing else is raised for any
input; a property test checks this.

Two parsers, one answer. Where orjson (C) is installed (``duplex.speedups``),
it parses every frame first: what it takes is RFC 8259 JSON whose strings are
Unicode text (it refuses lone surrogates, ``NaN`` and numbers that overflow a
double), so only the nesting and the integer range are left to look at, on the
value. Whatever it refuses, a value nested too deep, and any number it read
that is not plainly in range (it turns integers past 64 bits into floats, so a
float beyond ±``MAX_INT`` may have been one) goes again through the stdlib
parser with the hooks above, which knows each literal and so names each error
exactly; without orjson that parser reads every frame. A property test holds
the two to the same answer for any text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate

from duplex import commands as c
from duplex import speedups
from duplex.errors import InvalidRequest

MAX_DEPTH = 32
MAX_INT = 2**53 - 1
_INT_LITERAL_MAX = len(str(-MAX_INT))  # longer literals are out of range
_PATH_KEY_MAX = 64  # characters of one key in a param path

# A JSON string literal, escapes included (unrolled: linear, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class _OutOfRange:
    """Stands in for a number literal the parser met that is out of range; the
    walk turns it into an error that knows where it was."""

    literal: str
    decimal: bool

    def error(self, param: str) -> InvalidRequest:
        kind = "decimal" if self.decimal else "integer"
        low = self.literal.startswith("-")
        side = "below minimum" if low else "above maximum"
        limit = ("a finite number" if self.decimal
                 else f"a value {'>=' if low else '<='} {-MAX_INT if low else MAX_INT}")
        shown = self.literal if len(self.literal) <= 24 else self.literal[:21] + "..."
        return InvalidRequest(
            f"Invalid '{param or 'message'}': {kind} {side} value. Expected {limit}, "
            f"but got {shown} instead.",
            code=f"{kind}_{'below_min' if low else 'above_max'}_value", param=param or None)


def _int(literal: str) -> int | _OutOfRange:
    if len(literal) <= _INT_LITERAL_MAX:
        number = int(literal)
        if -MAX_INT <= number <= MAX_INT:
            return number
    return _OutOfRange(literal, decimal=False)


def _float(literal: str) -> float | _OutOfRange:
    number = float(literal)
    return number if math.isfinite(number) else _OutOfRange(literal, decimal=True)


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN/Infinity: Python accepts them, JSON does not


# One decoder for every frame: json.loads with hooks would build a new one each call.
_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays/objects deeper than ``MAX_DEPTH`` (brackets
    inside strings do not count), found without recursion."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False  # the common case: not even that many brackets
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH


def _printable(key: str) -> str:
    key = _SURROGATE.sub("\ufffd", key)
    return key if len(key) <= _PATH_KEY_MAX else key[:_PATH_KEY_MAX] + "..."


def _text_error(param: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid '{param or 'message'}': a string holds a lone UTF-16 "
                          "surrogate escape (\\ud800-\\udfff), which is not Unicode text",
                          code="invalid_value", param=param or None)


def _check(value: object) -> None:
    """Refuse out-of-range numbers and non-text strings anywhere in ``value``
    (iteratively: the depth is bounded, but no need to lean on that)."""
    stack: list[tuple[object, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                raise _text_error(path)
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{_printable(key)}" if path else _printable(key)
                if not key.isascii() and _SURROGATE.search(key):
                    raise _text_error(where)
                stack.append((child, where))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, _OutOfRange):
            raise item.error(path)


def _event_id(value: object) -> str | None:
    raw = value.get("event_id") if isinstance(value, dict) else None
    if not isinstance(raw, str) or (not raw.isascii() and _SURROGATE.search(raw)):
        return None
    return raw


def _plain(value: object) -> bool:
    """Whether a value orjson parsed is within the limits: nesting (counted on the
    value, level by level) and the integer range. Its strings need no look:
    orjson returns Unicode text only."""
    level, depth = [value], 0
    while level:
        depth += 1
        below: list[object] = []
        for item in level:
            if isinstance(item, str):
                continue  # most values (an append is all strings): one check, not three
            if isinstance(item, dict | list):
                if depth > MAX_DEPTH:
                    return False
                below.extend(item.values() if isinstance(item, dict) else item)
            elif isinstance(item, int | float) and not -MAX_INT <= item <= MAX_INT:
                return False
        level = below
    return True


def decode_json(text: str, *, max_bytes: int) -> object:
    """The JSON value of one client text frame, within every limit above."""
    # its UTF-8 size, without encoding ASCII: every client frame comes here
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidRequest(f"message of {size} bytes exceeds the {max_bytes}-byte limit",
                             code="event_too_large")
    fast = speedups.json_loads
    if fast is not None:
        try:
            value = fast(text)
        except ValueError:  # orjson.JSONDecodeError is one
            pass  # the stdlib parser says exactly why, or takes what orjson would not
        else:
            if _plain(value):
                return value
    return _decode_exact(text)


def _decode_exact(text: str) -> object:
    """The stdlib parse of a frame within the size limit: each refusal named,
    with the path of what is wrong."""
    if too_deep(text):
        raise InvalidRequest(f"message nests arrays/objects deeper than {MAX_DEPTH} levels",
                             code="json_too_deep")
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):  # RecursionError: too_deep is the guard
        raise InvalidRequest("message is not valid JSON", code="invalid_json") from None
    try:
        _check(value)
    except InvalidRequest as exc:
        exc.event_id = _event_id(value)
        raise
    return value


def decode_command(text: str, *, max_bytes: int) -> c.Command:
    """One ``/v1/realtime`` text frame as a command; ``InvalidRequest`` otherwise."""
    return c.parse_command(decode_json(text, max_bytes=max_bytes))
