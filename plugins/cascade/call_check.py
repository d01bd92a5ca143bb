"""A tool call's arguments checked against its tool's JSON Schema, sans-I/O.

A model server apart from the gateway writes calls the gateway did not hold
to a grammar, so each is checked before it becomes a ``function_call`` item:
a call that breaks its schema is an error the session hears, never an item a
client would choke on. The check covers what tool schemas use: ``type``
(one or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``anyOf``/``oneOf``; other keywords
(formats, lengths, patterns) are not checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "number": (int, float), "integer": (int,), "null": (type(None),),
}


class InvalidCall(ValueError):
    """A call the model made that the gateway must not pass on; says why."""


def checked_arguments(name: str, arguments: str, schema: Mapping[str, Any]) -> str:
    """``arguments`` (a JSON text; "" counts as ``{}``) if they are an object
    that fits ``schema``, else ``InvalidCall``."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        raise InvalidCall(f"the model called {name} with arguments that are not JSON: "
                          f"{arguments[:200]!r}") from None
    if not isinstance(value, dict):
        raise InvalidCall(f"the model called {name} with {arguments[:200]!r}, not an object")
    problem = _problem(value, schema, "arguments")
    if problem:
        raise InvalidCall(f"the model called {name} with arguments that break its schema: "
                          f"{problem}")
    return arguments if arguments.strip() else "{}"


def _problem(value: Any, schema: Mapping[str, Any], where: str) -> str:
    """What is wrong with ``value`` under ``schema`` ("" when nothing is)."""
    if not isinstance(schema, Mapping):
        return ""
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and \
                all(_problem(value, option, where) for option in options):
            return f"{where} matches none of its {key} schemas"
    kind = schema.get("type")
    if kind is not None and not _is_type(value, kind):
        return f"{where} is {json.dumps(value)[:80]}, not of type {json.dumps(kind)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {json.dumps(value)[:80]}, not one of {json.dumps(schema['enum'])}"
    if "const" in schema and value != schema["const"]:
        return f"{where} is not {json.dumps(schema['const'])}"
    if isinstance(value, dict):
        return _object_problem(value, schema, where)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            if problem := _problem(item, schema["items"], f"{where}[{i}]"):
                return problem
    return ""


def _object_problem(value: dict[str, Any], schema: Mapping[str, Any], where: str) -> str:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    for key in schema.get("required") or ():
        if key not in value:
            return f"{where} lack the required {key!r}"
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            sub = properties[key]
        elif extra is False:
            return f"{where} have {key!r}, which the schema does not allow"
        else:
            sub = extra if isinstance(extra, Mapping) else {}
        if problem := _problem(item, sub, f"{where}.{key}"):
            return problem
    return ""


def _is_type(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    for name in kinds:
        types = _TYPES.get(str(name))
        if types is None:
            return True  # a type this check does not know: not ours to refuse
        if isinstance(value, bool) and bool not in types:
            continue  # JSON's true is no number
        if isinstance(value, types) or (name == "integer" and isinstance(value, float)
                                        and value.is_integer()):
            return True
    return False
