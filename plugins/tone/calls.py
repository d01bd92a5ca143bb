"""When the tone plugin calls a tool, and with what: a deterministic rule for tests.

The tone "model" has no language, so its tool use is steered like its reply
length (``words=K``): a reply calls a tool when it must (``tool_choice``
``required`` or a named function) or when the instructions name one with
``call=NAME`` (one call per ``call=``, in order: ``call=a call=b`` makes two,
whatever ``parallel_tool_calls`` says: the session keeps the first alone
where it is false); the arguments are a sample of the tool's JSON Schema (each
required property: an enum's first value, ``"tone"`` for a string, 1 for a
number, true for a boolean, [] or {}). A reply that follows a tool's output
never calls again: it says the output ("the tool said …"), as a model that
uses a tool's result would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from duplex.tools import Tool, ToolSet

_CALL_RE = re.compile(r"\bcall=([A-Za-z0-9_-]{1,64})")
_SAMPLES: Mapping[str, Any] = {"string": "tone", "number": 1, "integer": 1, "boolean": True,
                               "array": [], "object": {}, "null": None}


def chosen_tools(tools: ToolSet, instructions: str) -> list[Tool]:
    """The tools this reply calls, in order (none: it answers in words)."""
    callable_tools = {t.name: t for t in tools.callable}
    if not callable_tools:
        return []
    named = [callable_tools[n] for n in _CALL_RE.findall(instructions) if n in callable_tools]
    if not named and tools.must_call:
        return [tools.callable[0]]
    return named


def sample_arguments(tool: Tool) -> str:
    """Arguments that satisfy the tool's schema (its required properties), as JSON."""
    return json.dumps(_sample_object(tool.parameters), separators=(",", ":"))


def _sample_object(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return {}
    return {name: _sample(properties.get(name)) for name in required if isinstance(name, str)}


def _sample(schema: object) -> Any:
    if not isinstance(schema, Mapping):
        return "tone"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):  # e.g. ["string", "null"]
        kind = kind[0] if kind else "string"
    if kind == "object":
        return _sample_object(schema)
    return _SAMPLES.get(kind if isinstance(kind, str) else "string", "tone")


def said_output(output: str) -> str:
    """The words of a reply to a tool's output."""
    return f"the tool said {output}".strip()
