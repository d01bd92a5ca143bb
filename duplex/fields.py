"""Field checks for client objects, refusing as OpenAI does.

OpenAI's validation errors say which field is wrong (``param``, its dotted
path) and why, with codes clients may branch on:

- ``invalid_type``: the JSON type is wrong (``"Invalid type for
  'session.instructions': expected a string, but got an integer instead."``);
- ``invalid_value``: the type is right, the value is not one of those allowed;
- ``integer_above_max_value`` / ``integer_below_min_value`` /
  ``decimal_above_max_value`` / ``decimal_below_min_value``: out of range.

Every helper takes the object and the key, and the dotted path of the object.
An absent or null field keeps ``current``: ``session.update`` changes only
the fields present.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from duplex.errors import InvalidRequest

_JSON_NAMES = {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string",
               list: "an array", dict: "an object", type(None): "null"}


def json_kind(value: object) -> str:
    """How OpenAI's messages name the JSON type of ``value``."""
    for kind, name in _JSON_NAMES.items():
        if type(value) is kind:
            return name
    return "an object" if isinstance(value, Mapping) else "a value"


def path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def wrong_type(param: str, expected: str, value: object) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}, but got {json_kind(value)} instead.",
        code="invalid_type", param=param)


def wrong_value(param: str, value: object, allowed: Collection[str]) -> InvalidRequest:
    names = [f"'{name}'" for name in allowed]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return InvalidRequest(f"Invalid value: {value!r}. Supported values are: {listed}.",
                          code="invalid_value", param=param)


def out_of_range(param: str, value: float, lo: float, hi: float, *,
                 integer: bool) -> InvalidRequest:
    kind = "integer" if integer else "decimal"
    low = value < lo
    side, limit = ("below_min", f">= {lo:g}") if low else ("above_max", f"<= {hi:g}")
    words = "below minimum" if low else "above maximum"
    return InvalidRequest(
        f"Invalid '{param}': {kind} {words} value. Expected a value {limit}, but got "
        f"{value:g} instead.", code=f"{kind}_{side}_value", param=param)


def obj(value: object, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise wrong_type(param, "an object", value)
    return value


def number(o: Mapping[str, Any], key: str, current: float, lo: float, hi: float,
           parent: str, *, integer: bool = False) -> float:
    value = o.get(key)
    if value is None:
        return current
    where = path(parent, key)
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            integer and isinstance(value, float) and not value.is_integer()):
        raise wrong_type(where, "an integer" if integer else "a number", value)
    if not lo <= value <= hi:
        raise out_of_range(where, value, lo, hi, integer=integer)
    return float(value)


def flag(o: Mapping[str, Any], key: str, current: bool, parent: str) -> bool:
    value = o.get(key)
    if value is None:
        return current
    if not isinstance(value, bool):
        raise wrong_type(path(parent, key), "a boolean", value)
    return value


def text(o: Mapping[str, Any], key: str, current: str, parent: str) -> str:
    value = o.get(key)
    if value is None:
        return current
    if not isinstance(value, str):
        raise wrong_type(path(parent, key), "a string", value)
    return value


def choice(o: Mapping[str, Any], key: str, current: str, allowed: Collection[str],
           parent: str) -> str:
    value = text(o, key, current, parent)
    if value not in allowed:
        raise wrong_value(path(parent, key), value, allowed)
    return value
